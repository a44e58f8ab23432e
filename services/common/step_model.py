"""The step-time lines of the latency model (paper appendix A), shared by the planner, which fits and plans with
them, and the router, which predicts each request's latency with the planner's fit (`ds:model`).

prefill(batch) = c0 + per_token · t + per_sq · t2   (t tokens computed in the batch, t2 = Σ `prompt_sq` of them)
decode(batch)  = c0 + per_ctx · t + per_req · b      (t context tokens, b requests)
"""

from __future__ import annotations

from dataclasses import dataclass


def prompt_sq(new: int, cached: int) -> int:
    """The t2 term of `new` prompt tokens computed after `cached` ones (a prefix-cache hit or earlier chunks):
    (cached + new)² − cached², the causal attention of those positions in the units of a whole prompt's
    length², which it is when nothing was cached."""
    return new * (new + 2 * cached)


@dataclass(frozen=True, slots=True)
class PrefillCoeffs:
    c0: float  # s
    per_token: float  # s per batch token
    per_sq: float  # s per unit of t2 (a squared prompt token)

    def seconds(self, tokens: float, sum_sq: float) -> float:
        return self.c0 + self.per_token * tokens + self.per_sq * sum_sq


@dataclass(frozen=True, slots=True)
class DecodeCoeffs:
    c0: float  # s
    per_ctx: float  # s per context token in the batch
    per_req: float  # s per request in the batch

    def seconds(self, context: float, batch: float) -> float:
        return self.c0 + self.per_ctx * context + self.per_req * batch


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
