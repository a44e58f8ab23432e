"""The latency model replanning plans with: the stack's own online fit (`ds:model`, `online_fit.py`) over the
profile or shipped set that seeds it.

The fit gives each phase's step time as the served instances show it; the seed gives what the fit cannot (the
model's shape, the KV capacity, the coefficients of a phase no instance has served yet, other parallel degrees
by appendix A's rescaling). Every plan records the model that made it (`describe`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

from services.common.step_model import stored_kinds
from services.planner.latency import LatencyModel


def with_fit(seed: LatencyModel, stored: dict) -> LatencyModel:
    """`seed` with the fitted phases in place of its own at the served degree (the seed's smallest), each from the
    kind with the most steps of it; unchanged where nothing is fitted."""
    kinds = stored_kinds(stored).values()
    pre = max((k for k in kinds if k.prefill), key=lambda k: k.prefill_steps, default=None)
    dec = max((k for k in kinds if k.decode), key=lambda k: k.decode_steps, default=None)
    if pre is None and dec is None:
        return seed
    tp = min(seed.by_tp)
    coeffs = seed.at(tp)
    if pre is not None:
        coeffs = replace(coeffs, prefill=pre.prefill)
    if dec is not None:  # one decode set for every batch size: the fit has no second one
        coeffs = replace(coeffs, decode_small=dec.decode, decode_large=dec.decode)
    fitted = [f"{phase} from {k.role}@{k.device} ({steps} steps)" for phase, k, steps in (
        ("prefill", pre, pre.prefill_steps if pre else 0), ("decode", dec, dec.decode_steps if dec else 0)) if k]
    source = f"fitted at {stored.get('fitted_at', 0):.0f}: {', '.join(fitted)}; seed {seed.source}"
    return replace(seed, by_tp={tp: coeffs}, source=source)


def describe(model: LatencyModel) -> dict:
    """Which model made a plan: its source and coefficients per degree."""
    return {"source": model.source, "coefficients": {str(tp): asdict(c) for tp, c in sorted(model.by_tp.items())}}
