"""The latency model of the DistServe paper's appendix A, per tensor-parallel degree.

prefill(batch) = c0 + per_token · t + per_sq · t2       (t tokens in the batch, t2 the sum of squared prompt lengths)
decode(batch)  = c0 + per_ctx · t + per_req · b          (t context tokens, b requests; a second set above `large_batch`)
mixed(batch)   = prefill(prompt tokens) + per_ctx · t + per_req · b   (chunked prefill: prompt chunks beside decodes)

In appendix-A terms per_token = C1·(4h² + 2hm), per_sq = C2·3h/block, per_ctx = C5·3h, with h and m divided by
the tensor-parallel degree; that is how `LatencyModel.at` fills in a degree that was never profiled (divided by the
measured intra-op speed-up K per doubling instead where TP profiles gave one, and pipeline stages adding their
hand-offs: `ParallelCost`, parallel_fit.py).

A mixture-of-experts model adds its routed experts' part to every step (`experts.py`), and an instance may split
them over its stage's GPUs (EP): a stage then holds width = max(tp, ep) GPUs, its attention and dense layers run
as width / tp data-parallel replicas of tp GPUs each, a batch's requests spread over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.experts import ONE_NODE, ExpertCost, ExpertSpread, Fabric
from services.common.step_model.shape import ModelShape


@dataclass(frozen=True, slots=True)
class TPCoefficients:
    prefill: PrefillCoeffs
    decode_small: DecodeCoeffs
    decode_large: DecodeCoeffs
    large_batch: int = 1 << 30  # batch size from which `decode_large` applies
    experts: ExpertSpread | None = None  # a mixture-of-experts model's routed experts (None: dense)

    def expert_time(self, tokens: float) -> float:
        """Seconds the routed experts add to a step computing `tokens` tokens (0 for a dense model)."""
        return self.experts.seconds(tokens) if self.experts is not None else 0.0

    def prefill_time(self, tokens: int, sum_sq: float) -> float:
        """Seconds to prefill one batch on the whole model (all pipeline stages)."""
        return self.prefill.seconds(tokens, sum_sq) + self.expert_time(tokens)

    def decode_coeffs(self, batch: int) -> DecodeCoeffs:
        """The decode set for a batch of `batch` requests."""
        return self.decode_large if batch >= self.large_batch else self.decode_small

    def decode_time(self, context_tokens: float, batch: int) -> float:
        """Seconds for one decode step of `batch` requests holding `context_tokens` in all."""
        return self.decode_coeffs(batch).seconds(context_tokens, batch) + self.expert_time(batch)

    def mixed_time(self, prompt_tokens: int, prompt_sq: float, context_tokens: float, batch: int) -> float:
        """Seconds for a step that computes prompt tokens (chunks) beside `batch` decoding requests: one fixed
        cost, the prefill's, plus the prefill terms of the prompt tokens and the decode terms of the requests."""
        d = self.decode_coeffs(batch)
        return (self.prefill.seconds(prompt_tokens, prompt_sq) + d.per_ctx * context_tokens + d.per_req * batch
                + self.expert_time(prompt_tokens + batch))

    def saturation_tokens(self, overhead: float = 0.1) -> int:
        """Lm: the batch size in tokens from which the fixed cost is under `overhead` of the batch time (the routed
        experts' time per token, where there are experts, taken at a batch large enough to activate them all)."""
        p, large = self.prefill, 1 << 16
        per_token = p.per_token + self.expert_time(large) / large
        return max(1, int(p.c0 / (overhead * per_token))) if per_token > 0 else 1 << 30

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

    def replicated(self, dp: int) -> TPCoefficients:
        """Over `dp` data-parallel replicas that share one batch: the per-token, per-request and attention terms
        shrink by dp, the fixed ones (a replica reads all its weights) stay."""
        if dp == 1:
            return self
        p, s, large = self.prefill, self.decode_small, self.decode_large
        return replace(
            self,
            prefill=PrefillCoeffs(p.c0, p.per_token / dp, p.per_sq / dp),
            decode_small=DecodeCoeffs(s.c0, s.per_ctx / dp, s.per_req / dp),
            decode_large=DecodeCoeffs(large.c0, large.per_ctx / dp, large.per_req / dp),
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
    experts: ExpertCost | None = None  # a mixture-of-experts model's routed experts; `by_tp` then holds the rest
    # CPU: (tp, cores per rank) → coefficients of ranks running that many intra-op threads, as profiled (never
    # rescaled: a thread's speed-up is the host's memory bandwidth and caches, not appendix A); `by_tp`: one core
    threaded: dict[tuple[int, int], TPCoefficients] = field(default_factory=dict)

    def threads_at(self, tp: int) -> list[int]:
        """Cores per rank an instance of `tp` ranks can be planned with: 1, and those profiled at that degree."""
        return [1] + sorted(threads for degree, threads in self.threaded if degree == tp)

    def at(self, tp: int, pp: int = 1, ep: int = 1, fabric: Fabric = ONE_NODE, threads: int = 1) -> TPCoefficients:
        """Coefficients at `tp` (and over `pp` stages): measured ones, else the nearest measured degree rescaled
        by appendix A (by the measured K per doubling where there is one); plus the measured stage hand-offs.
        A mixture-of-experts model adds its experts, split over each stage's max(tp, ep) GPUs in ep expert groups
        (whole experts where ep >= tp, their all-to-all over `fabric`; ep dividing tp: each expert sliced over its
        group's tp / ep GPUs), the rest replicated width / tp times. `threads` > 1: ranks of that many cores each,
        only as profiled (`threaded`)."""
        if threads > 1:
            if (tp, threads) not in self.threaded:
                raise ValueError(f"hardware: no profile of TP {tp} with {threads} cores per rank")
            coeffs = self.threaded[tp, threads]
        elif tp in self.by_tp:
            coeffs = self.by_tp[tp]
        else:
            nearest = min(self.by_tp, key=lambda known: (abs(known - tp), known))
            c = self.parallel
            doublings = math.log2(tp / nearest)
            coeffs = self.by_tp[nearest].scaled(tp / nearest) if c is None else \
                self.by_tp[nearest].scaled(c.k_prefill ** doublings, c.k_decode ** doublings)
        if pp > 1 and self.parallel is not None:
            coeffs = coeffs.piped(pp, self.parallel.stage_prefill, self.parallel.stage_decode)
        if self.experts is None:
            return coeffs
        width = max(tp, ep)
        spread = ExpertSpread(self.experts, width, ep, fabric.seconds_per_byte(width) if ep >= tp else 0.0)
        return replace(coeffs.replicated(width // tp), experts=spread)

    def weight_bytes_per_gpu(self, tp: int, pp: int, ep: int = 1) -> float:
        """Weight bytes one GPU of the layout holds: the dense part sliced over tp, the experts over max(tp, ep),
        each stage its layers' share."""
        s = self.shape
        return s.weight_bytes * (s.dense_params / tp + s.routed_params / max(tp, ep)) / pp

    def kv_capacity(self, tp: int, pp: int, ep: int = 1, threads: int = 1) -> int:
        """KV-cache tokens an instance of pp stages of max(tp, ep) devices holds; 0 when the weights do not fit.
        A latent (MLA) is whole on every tensor-parallel rank, so tp ranks hold one copy each. A tabled capacity
        holds for any expert groups inside the TP instance (each GPU holds the same weight bytes). On a CPU a device
        is a core (`gpu_memory_gb` its share of the host's memory), a rank of `threads` cores holds their shares."""
        if self.kv_tokens:
            return self.kv_tokens.get((tp, pp), 0) if tp % ep == 0 else 0
        s, width = self.shape, max(tp, ep)
        usable = 0.9 * self.gpu_memory_gb * 1e9 * width * threads * pp - s.weight_bytes * (s.dense_params * (width // tp) + s.routed_params)
        copies = tp if s.kv_entry else 1
        return max(0, int(usable // (s.kv_bytes_per_token() * copies)))
