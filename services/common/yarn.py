"""YaRN's attention scale (arXiv 2309.00071, Eq. 21), shared by the rotary tables and latent attention's scores."""

from __future__ import annotations

import math


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """The scale for a context `factor` times the original one (1 where it is not longer)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
