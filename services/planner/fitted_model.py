"""The latency model replanning plans with: the stack's own online fit (`ds:model`, `online_fit.py`) over the
profile or shipped set that seeds it.

The fit gives each phase's step time as the served instances show it; the seed gives what the fit cannot (the
model's shape, the KV capacity, the coefficients of a phase no instance has served yet, other parallel degrees
by appendix A's rescaling). Every plan records the model that made it (`describe`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

from services.planner.latency import DecodeCoeffs, LatencyModel, PrefillCoeffs


def _best(kinds: dict, phase: str) -> dict | None:
    """The kind with the most steps of `phase` among those fitted for it."""
    fitted = [k for k in kinds.values() if k.get(phase)]
    return max(fitted, key=lambda k: k["window"][f"{phase}_steps"], default=None)


def with_fit(seed: LatencyModel, stored: dict) -> LatencyModel:
    """`seed` with the fitted phases in place of its own at the served degree (the seed's smallest); unchanged
    where nothing is fitted."""
    kinds = stored.get("kinds", {})
    pre, dec = _best(kinds, "prefill"), _best(kinds, "decode")
    if pre is None and dec is None:
        return seed
    tp = min(seed.by_tp)
    coeffs = seed.at(tp)
    if pre is not None:
        coeffs = replace(coeffs, prefill=PrefillCoeffs(**pre["prefill"]))
    if dec is not None:  # one decode set for every batch size: the fit has no second one
        decode = DecodeCoeffs(**dec["decode"])
        coeffs = replace(coeffs, decode_small=decode, decode_large=decode)
    fitted = [f"{phase} from {k['role']}@{k['device']} ({k['window'][f'{phase}_steps']} steps)"
              for phase, k in (("prefill", pre), ("decode", dec)) if k]
    source = f"fitted at {stored.get('fitted_at', 0):.0f}: {', '.join(fitted)}; seed {seed.source}"
    return replace(seed, by_tp={tp: coeffs}, source=source)


def describe(model: LatencyModel) -> dict:
    """Which model made a plan: its source and coefficients per degree."""
    return {"source": model.source, "coefficients": {str(tp): asdict(c) for tp, c in sorted(model.by_tp.items())}}
