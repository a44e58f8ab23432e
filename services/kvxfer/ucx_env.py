"""UCX settings, applied to the environment before ucxx is first imported (UCX reads them there)."""

from __future__ import annotations

import os


def apply_ucx_env(tls: str, rndv_scheme: str) -> None:
    """Set UCX defaults the environment has not set already."""
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")  # ucxx sets UCX_MEMTYPE_CACHE, unknown to UCX 1.21
    if rndv_scheme:
        os.environ.setdefault("UCX_RNDV_SCHEME", rndv_scheme)
    if tls:
        os.environ.setdefault("UCX_TLS", tls)
