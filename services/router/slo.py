"""A request's latency objectives: `x-slo-ttft-ms` / `x-slo-tpot-ms` as HTTP headers or gRPC metadata, the
router's defaults where the client gives none."""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.common.errors import EngineInputError
from services.common.slo import SLO

TTFT_HEADER, TPOT_HEADER = "x-slo-ttft-ms", "x-slo-tpot-ms"


def _seconds(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        ms = float(raw)
    except ValueError:
        raise EngineInputError(name, f"must be a number of milliseconds, not {raw!r}") from None
    if not math.isfinite(ms) or ms <= 0:
        raise EngineInputError(name, f"must be a positive number of milliseconds, not {raw!r}")
    return ms / 1000


def requested_slo(headers: Mapping[str, str]) -> SLO:
    """The objectives a request carries (HTTP headers or gRPC metadata, lower-case keys); raises
    EngineInputError naming the header when one is not a positive number."""
    return SLO(_seconds(headers, TTFT_HEADER), _seconds(headers, TPOT_HEADER))


def default_slo(ttft_ms: float, tpot_ms: float) -> SLO:
    """The router's defaults (0: no objective)."""
    return SLO(ttft_ms / 1000 if ttft_ms > 0 else None, tpot_ms / 1000 if tpot_ms > 0 else None)
