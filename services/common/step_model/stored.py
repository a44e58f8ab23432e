"""The online fit as the planner publishes it at `ds:model` (`services/planner/online_fit.py`), read in one place:
per instance kind for the router's predictions (`FittedModel`), over a seed for replanning (`with_fit`).

The fit gives each phase's step time as the served instances show it; the seed gives what the fit cannot (the
model's shape, the KV capacity, the coefficients of a phase no instance has served yet, other parallel degrees
by appendix A's rescaling). Every plan records the model that made it (`describe`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import LatencyModel


@dataclass(frozen=True, slots=True)
class KindFit:
    """One kind of instance's step lines as the planner fits them online (`ds:model`), each with the steps it
    rests on; None where that phase is not fitted."""

    role: str
    device: str
    prefill: PrefillCoeffs | None
    decode: DecodeCoeffs | None
    prefill_steps: int = 0
    decode_steps: int = 0


def stored_kinds(stored: dict) -> dict[str, KindFit]:
    """The kinds of a stored online fit (`ds:model`, which planner/online_fit.py writes), by `role@device`: the one
    reading of that record, for the router's predictions and the planner's replanning."""
    kinds = {}
    for key, kind in stored.get("kinds", {}).items():
        role, _, device = key.partition("@")
        window = kind.get("window", {})
        kinds[key] = KindFit(kind.get("role", role), kind.get("device", device),
                             PrefillCoeffs(**kind["prefill"]) if kind.get("prefill") else None,
                             DecodeCoeffs(**kind["decode"]) if kind.get("decode") else None,
                             int(window.get("prefill_steps", 0)), int(window.get("decode_steps", 0)))
    return kinds


@dataclass(frozen=True, slots=True)
class FittedModel:
    """Step times per instance kind and device (`prefill@cpu:0`), as the planner fitted them."""

    prefill: dict[str, PrefillCoeffs]
    decode: dict[str, DecodeCoeffs]
    fitted_at: float = 0.0
    ttft_hops: float = 0.0  # s a TTFT holds besides the prefill queue and step (the request path's hops)
    handoff: float = 0.0  # s from the first token at the router to the decode instance's first step

    @classmethod
    def from_json(cls, model: dict) -> FittedModel:
        kinds = stored_kinds(model)
        return cls({k: f.prefill for k, f in kinds.items() if f.prefill}, {k: f.decode for k, f in kinds.items() if f.decode},
                   float(model.get("fitted_at", 0.0)), float(model.get("ttft_hops_s") or 0.0),
                   float(model.get("handoff_s") or 0.0))


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
    if pre is not None and pre.prefill is not None:
        coeffs = replace(coeffs, prefill=pre.prefill)
    if dec is not None and dec.decode is not None:  # one decode set for every batch size: the fit has no second one
        coeffs = replace(coeffs, decode_small=dec.decode, decode_large=dec.decode)
    fitted = [f"{phase} from {k.role}@{k.device} ({steps} steps)" for phase, k, steps in (
        ("prefill", pre, pre.prefill_steps if pre else 0), ("decode", dec, dec.decode_steps if dec else 0)) if k]
    source = f"fitted at {stored.get('fitted_at', 0):.0f}: {', '.join(fitted)}; seed {seed.source}"
    return replace(seed, by_tp={tp: coeffs}, source=source)


def describe(model: LatencyModel) -> dict:
    """Which model made a plan: its source, coefficients per degree (`threaded`: per TP degree x cores per rank, CPU
    ranks of several cores) and routed experts' costs (None: dense)."""
    return {"source": model.source, "coefficients": {str(tp): asdict(c) for tp, c in sorted(model.by_tp.items())},
            "threaded": {f"{tp}x{threads}": asdict(c) for (tp, threads), c in sorted(model.threaded.items())},
            "experts": asdict(model.experts) if model.experts is not None else None}
