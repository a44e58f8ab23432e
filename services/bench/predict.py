"""The planner's prediction for the benchmarked configuration, driven by the latency model fitted to this device's
profile and fed the very requests and arrival times the benchmark sends: disaggregated, one prefill and one
decode instance (TP = PP = 1) in the planner's simulator; colocated and chunked, one instance per device sharing
prefill and decode in one step loop (`services/planner/colocated.py`).

`calibrated` rescales the fitted model to what lone requests take through the served stack (gRPC hops, the
router, the step loop's own work, and whatever else shares the cores): prefill terms by the ratio of served to
predicted lone TTFT, decode terms by that of lone TPOT. `fitted` describes the served system itself: the latency
model refitted to the steps the instances served (a calibration load, then the points before the one
predicted), and the request path's overheads measured on lone requests (`served.py`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from services.bench.slo import ScaledSLO
from services.bench.workload import Sample
from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.common.step_model.profile_fit import fit_profile, read_profile
from services.planner import simulator
from services.planner.colocated import simulate_colocated
from services.planner.goodput import max_rate
from services.planner.placement import Cluster, Parallel, pack
from services.planner.serving import ServingOverheads

PREDICTED_MODES = ("disagg", "colocated", "chunked")


@dataclass(frozen=True, slots=True)
class Predictor:
    model: LatencyModel
    cluster: Cluster
    max_batch_tokens: int
    serving: ServingOverheads | None = None  # the served path's overheads; None: the planner's ideal path
    mode: str = "disagg"  # or colocated / chunked: one instance per device
    cache_block: int = 0  # disagg with prefix caching: the block size its hits are modelled in (0: no hits)

    @classmethod
    def from_profile(cls, path: str, kv_tokens: int, max_batch_tokens: int, link_gbps: float,
                     mode: str = "disagg", cache_block: int = 0) -> Predictor:
        """`kv_tokens`: an instance's KV capacity; `link_gbps`: the prefill-to-decode KV transfer rate."""
        model = fit_profile(read_profile(path))
        model.kv_tokens = {(1, 1): kv_tokens}
        return cls(model, Cluster(nodes=1, gpus_per_node=2, intra_node_gbps=link_gbps), max_batch_tokens, mode=mode,
                   cache_block=cache_block)

    def calibrated(self, lone: list[tuple[int, int, float, float]]) -> tuple[Predictor, dict[str, float]]:
        """This predictor rescaled to lone requests (prompt tokens, output tokens, TTFT s, TPOT s) served one at a
        time; returns it and the two factors."""
        c = self.model.at(1)
        prefill = statistics.median(ttft / c.prefill_time(p, p * p) for p, _, ttft, _ in lone)
        decode = statistics.median(tpot / c.decode_time(p + o // 2, 1) for p, o, _, tpot in lone)
        model = replace(self.model, by_tp={1: _scaled(c, prefill, decode)})
        return replace(self, model=model), {"prefill_factor": prefill, "decode_factor": decode}

    def fitted(self, coeffs: TPCoefficients, serving: ServingOverheads) -> Predictor:
        """This predictor with coefficients fitted to served steps and the served path's overheads."""
        return replace(self, model=replace(self.model, by_tp={1: coeffs}), serving=serving)

    def attainment(self, sample: Sample, rate: float, slo: ScaledSLO) -> float:
        """Simulated share of the sample's requests meeting both objectives at `rate`."""
        if self.mode == "disagg":
            placement = pack(self.cluster, Parallel(), 1, Parallel(), 1)
            result = simulator.simulate(self.model, placement, self.cluster, sample.prompts, sample.outputs,
                                        sample.arrivals(rate), self.max_batch_tokens, self.serving,
                                        cached=sample.cached_tokens(self.cache_block) if self.cache_block else None)
        else:
            result = simulate_colocated(self.model.at(1), self.mode, self.cluster.gpus_per_node,
                                        self.model.kv_capacity(1, 1), self.max_batch_tokens, sample.prompts,
                                        sample.outputs, sample.arrivals(rate), self.serving, self.model.shape)
        limits = slo.limits
        return result.attainment(limits)

    def goodput(self, sample_at: Callable[[float], Sample], slo: ScaledSLO, guess: float = 1.0) -> float:
        """Highest simulated rate (req/s, both instances) with attainment ≥ the target; `sample_at(rate)` gives
        the requests a run at that rate sends."""
        return max_rate(lambda rate: self.attainment(sample_at(rate), rate, slo), slo.base.attainment, guess)


def _scaled(c: TPCoefficients, prefill: float, decode: float) -> TPCoefficients:
    p, small, large = c.prefill, c.decode_small, c.decode_large
    return replace(c, prefill=PrefillCoeffs(p.c0 * prefill, p.per_token * prefill, p.per_sq * prefill),
                   decode_small=DecodeCoeffs(small.c0 * decode, small.per_ctx * decode, small.per_req * decode),
                   decode_large=DecodeCoeffs(large.c0 * decode, large.per_ctx * decode, large.per_req * decode))

