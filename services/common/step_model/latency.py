"""The latency model of the DistServe paper's appendix A, per tensor-parallel degree.

prefill(batch) = c0 + per_token · t + per_sq · t2       (t tokens in the batch, t2 the sum of squared prompt lengths)
decode(batch)  = c0 + per_ctx · t + per_req · b          (t context tokens, b requests; a second set above `large_batch`)
mixed(batch)   = prefill(prompt tokens) + per_ctx · t + per_req · b   (chunked prefill: prompt chunks beside decodes)

In appendix-A terms per_token = C1·(4h² + 2hm), per_sq = C2·3h/block, per_ctx = C5·3h, with h and m divided by
the tensor-parallel degree; that is how `LatencyModel.at` fills in a degree that was never profiled (divided by the
measured intra-op speed-up K per doubling instead where TP profiles gave one, and pipeline stages adding their
hand-offs: `ParallelCost`, parallel_fit.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.shape import ModelShape


@dataclass(frozen=True, slots=True)
class TPCoefficients:
    prefill: PrefillCoeffs
    decode_small: DecodeCoeffs
    decode_large: DecodeCoeffs
    large_batch: int = 1 << 30  # batch size from which `decode_large` applies

    def prefill_time(self, tokens: int, sum_sq: int) -> float:
        """Seconds to prefill one batch on the whole model (all pipeline stages)."""
        return self.prefill.seconds(tokens, sum_sq)

    def decode_coeffs(self, batch: int) -> DecodeCoeffs:
        """The decode set for a batch of `batch` requests."""
        return self.decode_large if batch >= self.large_batch else self.decode_small

    def decode_time(self, context_tokens: int, batch: int) -> float:
        """Seconds for one decode step of `batch` requests holding `context_tokens` in all."""
        return self.decode_coeffs(batch).seconds(context_tokens, batch)

    def mixed_time(self, prompt_tokens: int, prompt_sq: int, context_tokens: int, batch: int) -> float:
        """Seconds for a step that computes prompt tokens (chunks) beside `batch` decoding requests: one fixed
        cost, the prefill's, plus the prefill terms of the prompt tokens and the decode terms of the requests."""
        d = self.decode_coeffs(batch)
        return self.prefill_time(prompt_tokens, prompt_sq) + d.per_ctx * context_tokens + d.per_req * batch

    def saturation_tokens(self, overhead: float = 0.1) -> int:
        """Lm: the batch size in tokens from which the fixed cost is under `overhead` of the batch time."""
        p = self.prefill
        return max(1, int(p.c0 / (overhead * p.per_token))) if p.per_token > 0 else 1 << 30

    def scaled(self, factor: float, decode_factor: float | None = None) -> TPCoefficients:
        """The same device with h and m divided by `factor` more (appendix A): size-dependent terms shrink
        (decode's by `decode_factor` where given)."""
        p, s, large = self.prefill, self.decode_small, self.decode_large
        d = factor if decode_factor is None else decode_factor
        return replace(
            self,
            prefill=PrefillCoeffs(p.c0, p.per_token / factor, p.per_sq / factor),
            decode_small=DecodeCoeffs(s.c0, s.per_ctx / d, s.per_req),
            decode_large=DecodeCoeffs(large.c0, large.per_ctx / d, large.per_req),
        )

    def piped(self, stages: int, prefill: tuple[float, float], decode: tuple[float, float]) -> TPCoefficients:
        """Over `stages` pipeline stages: each of the stages − 1 hand-offs adds (fixed, per batch token) to a
        prefill and (fixed, per request) to a decode step."""
        n = stages - 1
        p, s, large = self.prefill, self.decode_small, self.decode_large
        return replace(
            self,
            prefill=PrefillCoeffs(p.c0 + n * prefill[0], p.per_token + n * prefill[1], p.per_sq),
            decode_small=DecodeCoeffs(s.c0 + n * decode[0], s.per_ctx, s.per_req + n * decode[1]),
            decode_large=DecodeCoeffs(large.c0 + n * decode[0], large.per_ctx, large.per_req + n * decode[1]),
        )


@dataclass(frozen=True, slots=True)
class ParallelCost:
    """The parallel model measured on an engine (parallel_fit.py): the intra-op speed-up K of a doubled
    tensor-parallel degree, and the seconds each pipeline stage hand-off adds."""

    k_prefill: float
    k_decode: float
    stage_prefill: tuple[float, float]  # (fixed, per batch token)
    stage_decode: tuple[float, float]   # (fixed, per request)
    measured: tuple[tuple[int, int], ...] = ()  # the (tp, pp) layouts profiled


@dataclass(slots=True)
class LatencyModel:
    """Coefficients of one model on one kind of device, and how much KV cache fits."""

    shape: ModelShape
    by_tp: dict[int, TPCoefficients]
    source: str
    kv_tokens: dict[tuple[int, int], int] = field(default_factory=dict)  # (tp, pp) → tokens, when tabled
    gpu_memory_gb: float = 80.0
    parallel: ParallelCost | None = None  # measured K and stage cost; None: ideal speed-up, free stages

    def at(self, tp: int, pp: int = 1) -> TPCoefficients:
        """Coefficients at `tp` (and over `pp` stages): measured ones, else the nearest measured degree rescaled
        by appendix A (by the measured K per doubling where there is one); plus the measured stage hand-offs."""
        if tp in self.by_tp:
            coeffs = self.by_tp[tp]
        else:
            nearest = min(self.by_tp, key=lambda known: (abs(known - tp), known))
            c = self.parallel
            doublings = math.log2(tp / nearest)
            coeffs = self.by_tp[nearest].scaled(tp / nearest) if c is None else \
                self.by_tp[nearest].scaled(c.k_prefill ** doublings, c.k_decode ** doublings)
        if pp > 1 and self.parallel is not None:
            coeffs = coeffs.piped(pp, self.parallel.stage_prefill, self.parallel.stage_decode)
        return coeffs

    def kv_capacity(self, tp: int, pp: int) -> int:
        """KV-cache tokens an instance of tp × pp devices holds; 0 when the weights do not fit."""
        if self.kv_tokens:
            return self.kv_tokens.get((tp, pp), 0)
        usable = 0.9 * self.gpu_memory_gb * 1e9 * tp * pp - 2 * self.shape.params
        return max(0, int(usable // self.shape.kv_bytes_per_token()))
