"""The latency model (paper appendix A), its one home: the step lines here, fitted and read by the planner, the
router's admission and the bench alike.

prefill(batch) = c0 + per_token · t + per_sq · t2   (t tokens computed in the batch, t2 = Σ `prompt_sq` of them)
decode(batch)  = c0 + per_ctx · t + per_req · b      (t context tokens, b requests)

- `shape`: the model's shape the terms and the memory estimate take (`ModelShape`).
- `latency`: the lines per tensor-parallel degree (`TPCoefficients`), rescaled to other degrees and pipeline
  stages (`ParallelCost`), with the memory and KV capacity (`LatencyModel`).
- `experts`: a mixture-of-experts model's routed experts (expert spread, expert parallelism's all-to-all);
  `moe_scaling`: such a model's set scaled from a dense one's.
- fits: `profile_fit` (the profile file `distserve profile` writes, non-negative least squares), `parallel_fit`
  (TP speed-up and stage cost from TP/PP profiles), `served_fit` (the steps a served stack logged).
- `stored`: the online fit as published at `ds:model` (read by the router and replanning).
- `predict`: a request's TTFT behind a prefill queue and TPOT in a decode batch, from the lines.
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
