"""What a benchmark run reports: one point per measured rate, one result per mode and workload."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from services.bench.loadgen import RequestResult
from services.bench.slo import ScaledSLO, attainment, tightest_scale, wilson_interval

STAGES = ("prefill_queue", "prefill", "transfer", "decode_queue", "decode")


@dataclass(slots=True)
class Point:
    rate: float  # req/s offered to the whole deployment
    attainment: float  # share meeting TTFT and TPOT
    attainment_se: float  # its binomial standard error, sqrt(a(1 - a) / requests): the sampling noise of one run
    attainment_ci: tuple[float, float]  # its 95% confidence interval (Wilson)
    ttft_attainment: float
    tpot_attainment: float
    tightest_slo_scale: float  # smallest SLO scale that this run would still meet at the target
    requests: int  # of all runs of the rate
    failed: int
    ttft: dict[str, float]  # mean / p50 / p90 seconds of completed requests
    tpot: dict[str, float]
    first_gap: dict[str, float]  # first → second token at the client (disaggregated: the hand-off), same stats
    e2e: dict[str, float]
    stages: dict[str, float]  # mean seconds per stage (router records)
    transfer_share: float | None  # mean transfer / mean end-to-end latency; None without a transfer stage
    wall_s: float
    per_request: list[tuple[int, int, float | None, float | None]]  # (prompt, output, TTFT s, TPOT s); None: failed
    prefix_hit_rate: float | None  # of completed requests: prompt tokens not computed (a prefix cache had them) / all
    first_turn_ttft: dict[str, float]  # TTFT stats of completed first turns (every request of a single-turn workload)
    followup_ttft: dict[str, float]  # ... of completed follow-up turns
    decode_hit_rate: float | None = None  # ... prompt tokens the decode instance held, so not pulled / all
    simulated_attainment: float | None = None  # the planner's simulator, latency model as profiled
    calibrated_attainment: float | None = None  # ... with the model rescaled to served lone requests
    fitted_attainment: float | None = None  # ... with the model fitted to served steps, plus the path's overheads
    replayed_attainment: float | None = None  # ... as fitted, but to this point's own served steps (not a prediction)
    served_fit: dict[str, float] = field(default_factory=dict)  # the latency model fitted to this point's steps
    prefill_steps: list[tuple[int, int, int, float, float]] = field(default_factory=list)  # ... its prefill steps
    runs: int = 1  # runs of the same requests pooled in this point (--repeats)
    live: list[dict] = field(default_factory=list)  # per run: the router's live model errors (`live.py`, --overload)


@dataclass(slots=True)
class ModeResult:
    mode: str
    workload: str
    devices: int
    slo: dict[str, float]
    goodput: float  # req/s, whole deployment
    goodput_per_device: float
    points: list[Point]
    lengths: dict[str, float]
    lone: dict[str, float] = field(default_factory=dict)  # served lone-request TTFT/TPOT from the warm-up
    simulated_goodput_per_device: float | None = None
    calibrated_goodput_per_device: float | None = None
    fitted_goodput_per_device: float | None = None
    calibration: dict = field(default_factory=dict)  # prefill/decode factors, link Gbit/s, served fit, overheads
    simulated_curve: list[tuple[float, float]] = field(default_factory=list)  # (rate, attainment)
    calibrated_curve: list[tuple[float, float]] = field(default_factory=list)
    fitted_curve: list[tuple[float, float]] = field(default_factory=list)
    overload: list[dict] = field(default_factory=list)  # OverloadPoint fields: past the knee, admission off and on
    fitted_knee: float | None = None  # req/s: the fitted simulator's goodput the `--at-knee` rates are multiples of
    prefix_caching: str = "on"  # the instances' setting
    routing: str = "model"  # the router's prefill pick (disagg)
    device_set: str = ""  # the stack's devices, space-separated

    @property
    def settings(self) -> str:
        return f"cache {self.prefix_caching} route {self.routing}" + (f" on {self.device_set}" if self.device_set else "")

    def point_at(self, rate: float) -> Point | None:
        return next((p for p in self.points if p.rate == rate), None)

    def reference_point(self) -> Point | None:
        """The goodput point, else the lowest measured rate (where the breakdown is least congested)."""
        return self.point_at(self.goodput) or min(self.points, key=lambda p: p.rate, default=None)


def names(results: list[ModeResult]) -> list[str]:
    """Each result's name in tables and plots: its mode, with its settings where they vary between the results."""
    varied = len({r.settings for r in results}) > 1
    return [f"{r.mode} {r.settings}" if varied else r.mode for r in results]


def _dist(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {}
    p50, p90 = np.percentile(values, [50, 90])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90)}


def summarize(rate: float, results: list[RequestResult], slo: ScaledSLO, wall_s: float) -> Point:
    """A point from its requests (one run's, or several runs' pooled)."""
    ok = np.array([r.ok for r in results], bool)
    ttft = np.array([r.ttft for r in results])
    tpot = np.array([r.tpot for r in results])
    e2e = np.array([r.e2e for r in results])
    gaps = np.array([g for g in (r.first_gap for r in results) if g is not None])
    n = max(len(results), 1)
    met = attainment(ttft, tpot, ok, slo)
    stage_means = {s: float(np.mean([r.stages[s] for r in results if s in r.stages]))
                   for s in STAGES if any(s in r.stages for r in results)}
    share = None
    if "transfer" in stage_means and ok.any():
        share = stage_means["transfer"] / float(e2e[ok].mean())
    first = np.array([r.turn == 0 for r in results], bool)
    prompted = sum(r.prompt_tokens for r in results if r.ok)
    return Point(
        rate=rate, attainment=met, attainment_se=float(np.sqrt(met * (1 - met) / n)),
        attainment_ci=wilson_interval(met, len(results)),
        ttft_attainment=float(np.sum(ok & (ttft <= slo.limits.ttft)) / n),
        tpot_attainment=float(np.sum(ok & (tpot <= slo.limits.tpot)) / n),
        tightest_slo_scale=tightest_scale(ttft, tpot, ok, slo), requests=len(results), failed=int((~ok).sum()),
        ttft=_dist(ttft[ok]), tpot=_dist(tpot[ok]), first_gap=_dist(gaps), e2e=_dist(e2e[ok]), stages=stage_means,
        transfer_share=share, wall_s=wall_s,
        per_request=[(r.prompt_tokens, r.output_tokens, r.ttft if r.ok else None, r.tpot if r.ok else None)
                     for r in results],
        prefix_hit_rate=sum(r.cached_tokens for r in results if r.ok) / prompted if prompted else None,
        first_turn_ttft=_dist(ttft[ok & first]), followup_ttft=_dist(ttft[ok & ~first]),
        decode_hit_rate=sum(r.decode_cached_tokens for r in results if r.ok) / prompted if prompted else None)
