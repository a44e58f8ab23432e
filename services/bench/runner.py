"""One benchmark run: for each mode, serve (a stack it starts, or a running router), warm up, then for each
workload sweep the rate to the goodput (or measure one fixed rate), beside the planner's prediction."""

from __future__ import annotations

import asyncio
import math
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import get_args

import numpy as np
from rich.progress import Progress

from services.bench.live import run_errors, scrape
from services.bench.loadgen import Conversation, RequestResult, attach_stages, renamed, run_load, single, stream_tail
from services.bench.overload import REFUSE_ENV, OverloadPoint, admission_env, overload_point, slo_metadata
from services.bench.predict import PREDICTED_MODES, Predictor
from services.bench.results import ModeResult, summarize
from services.bench.served import joins_of, loaded_overheads, path_overheads, prefill_rows
from services.bench.slo import ScaledSLO, lone_latencies, scaled_slo
from services.bench.sweep import fixed_rates_goodput, goodput_search, pooled_runs
from services.bench.workload import SYSTEM_PROMPTS, THINK_S, BenchWorkload, Sample
from services.common.devices import device_units
from services.common.engine_settings import EngineSettings, OnOff, engine_fields
from services.common.net import free_port
from services.common.slo import SLO
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.profile_fit import fit_profile, read_profile
from services.common.step_model.served_fit import ServedFit, fit_steps
from services.common.step_model.shape import ModelShape
from services.launcher.stack import Stack, StackConfig
from services.planner.online_fit import served_steps
from services.planner.serving import ServingOverheads
from services.planner.shapes import load_shape
from services.router.config import RouterSettings

DEFAULT_LINK_GBPS = 10.0  # used for the simulator's guess before any transfer was measured
ROUTINGS: tuple[str, ...] = get_args(RouterSettings.model_fields["routing"].annotation)
ROUTING_ENV = "DISTSERVE_ROUTER_ROUTING"
VARIED = ("prefix-caching", "routing")  # settings `vary` can flip


@dataclass(frozen=True, slots=True)
class BenchConfig(EngineSettings):
    model: str  # model folder
    modes: tuple[str, ...] = ("disagg",)
    workloads: tuple[str, ...] = ("chatbot",)
    devices: tuple[str, ...] = ("cpu:0", "cpu:1")
    other_devices: tuple[tuple[str, ...], ...] = ()  # with start: each variant also runs on each of these device sets
    start: bool = True  # start a stack per mode; else use `router` and `redis_url`
    router: str = ""
    redis_url: str = ""
    num_requests: int = 100  # requests per point at most (the sample's first ones)
    min_requests: int = 30  # ... and at least
    window_s: float = 40.0  # a point takes the requests arriving within this window, within those bounds
    prompt_scale: float = 0.25
    output_scale: float = 0.5
    cv: float = 1.0
    seed: int = 0
    think_s: float = THINK_S  # multi-turn: mean think time between an answer and the next turn
    system_prompts: int = SYSTEM_PROMPTS  # shared-prompt: how many distinct system prompts
    routing: str = RouterSettings.model_fields["routing"].default  # the started router's prefill pick
    vary: tuple[str, ...] = ()  # of VARIED: each mode also runs with these settings flipped (routing: disagg only)
    ttft: float | None = None  # s at scale 1; None: ttft_scale × the lone TTFT of the profile
    tpot: float | None = None
    ttft_scale: float = 5.0
    tpot_scale: float = 2.0
    slo_scale: float = 1.0
    target: float = 0.9
    rate: float | None = None  # a fixed rate: one point per mode and workload
    start_rate: float | None = None  # None: half the simulated disaggregated goodput (1 req/s without a profile)
    factor: float = 1.5
    bisect_steps: int = 2
    max_steps: int = 5
    repeats: int = 1  # runs of a rate at most: it runs again while its pooled attainment is undecided
    repeat_within: float = 2.0  # ... i.e. within this many standard errors of the target
    simulate: bool = False
    profile: str = ""  # profile file of this device (`distserve profile`)
    service_cores: tuple[int, ...] | None = None  # the started stack's router and Redis; None: its default
    warmup: int = 6  # lone requests (then a burst of as many) before measuring
    calibration: int = 40  # requests of the calibration load (--simulate) at least, from a sample of another seed
    calibration_rate: float | None = None  # req/s of it; None: the first workload's start rate
    overload: tuple[float, ...] = ()  # multiples of disagg's goodput run with admission off and on (overload.py)
    at_knee: tuple[float, ...] = ()  # instead of the search: these multiples of the fitted simulator's knee, each
    # point (and overload run) sending exactly `num_requests` requests


@dataclass(frozen=True, slots=True)
class Variant:
    """What one started stack serves with."""

    mode: str
    prefix_caching: OnOff
    routing: str  # of ROUTINGS
    devices: tuple[str, ...] = ()  # the stack's devices (empty: the configured ones)


def variants(cfg: BenchConfig) -> list[Variant]:
    """Each mode with the configured settings, and with every combination of the varied ones flipped; each of those
    on every further device set."""

    def values(setting: str, given: str, both: tuple[str, ...]) -> tuple[str, ...]:
        return (given, *(v for v in both if v != given)) if setting in cfg.vary else (given,)

    return [Variant(mode, caching, routing, devices) for devices in ((), *cfg.other_devices) for mode in cfg.modes
            for caching in values("prefix-caching", cfg.prefix_caching, get_args(OnOff))
            for routing in (values("routing", cfg.routing, ROUTINGS) if mode == "disagg" else (cfg.routing,))]


@dataclass(frozen=True, slots=True)
class Served:
    mode: str
    address: str
    redis_url: str
    devices: tuple[str, ...]
    stack: Stack | None = None  # the stack the bench started, with the router's admission and metrics (`live`)

    @property
    def live(self) -> bool:
        """Whether the router predicts every request with the planner's online fit (`--overload`, disagg)."""
        return self.stack is not None and self.stack.config.planner_port > 0

    def router_metrics(self) -> str:
        assert self.stack is not None
        router = next(p for p in self.stack.procs if p.name == "router")
        return f"http://{self.stack.config.host}:{router.metrics_port}/metrics"


@contextmanager
def serving(cfg: BenchConfig, variant: Variant) -> Iterator[Served]:
    """A stack of `variant` on the configured devices (disagg: first half prefill, rest decode), or the given
    router (serving as it was started)."""
    mode = variant.mode
    if not cfg.start:
        yield Served(mode, cfg.router, cfg.redis_url, cfg.devices)
        return
    devices = variant.devices or cfg.devices
    n = len(devices)
    admission = bool(cfg.overload) and mode == "disagg"  # the router predicts from the planner's online fit
    env = {ROUTING_ENV: variant.routing, **(admission_env(cfg.max_batch_tokens) if admission else {})}
    engine = engine_fields(replace(cfg, prefix_caching=variant.prefix_caching))
    stack = Stack(StackConfig(model=cfg.model, mode=mode, prefill=n // 2, decode=n - n // 2, devices=devices,
                              grpc_port=free_port(), http_port=0, **engine, service_cores=cfg.service_cores,
                              log_level="WARNING", planner_port=free_port() if admission else 0, extra_env=env))
    stack.start()
    try:
        yield Served(mode, stack.router_address, stack.redis_url, devices, stack if admission else None)
    finally:
        stack.stop()


def run_requests(served: Served, conversations: list[Conversation], progress: Progress | None, label: str,
                 metadata: tuple[tuple[str, str], ...] = ()) -> list[RequestResult]:
    """Runs the conversations (with `metadata` on each call) and joins their stage breakdowns. A run shares cached
    K/V with no other (a cache salt of its own): a rate's requests rerun at the next rate would hit the cache."""
    task = progress.add_task(label, total=sum(len(c.turns) for c in conversations)) if progress else None
    tail = stream_tail(served.redis_url)
    done = (lambda: progress.advance(task)) if progress else (lambda: None)
    results = asyncio.run(run_load(served.address, conversations, done, metadata=metadata, cache_salt=uuid.uuid4().hex))
    attach_stages(served.redis_url, results, tail)
    return results


@dataclass(frozen=True, slots=True)
class WarmUp:
    lone: list[RequestResult]  # requests served one at a time
    link_gbps: float  # measured KV transfer rate (disaggregated), else the default
    began: float  # unix seconds: the lone requests ran from then ...
    lone_end: float  # ... to then

    def served_lone(self) -> dict[str, float]:
        ok = [r for r in self.lone if r.ok]
        if not ok:
            return {}
        return {"ttft_s": statistics.median(r.ttft for r in ok), "tpot_s": statistics.median(r.tpot for r in ok)}

    def lone_points(self) -> list[tuple[int, int, float, float]]:
        return [(r.prompt_tokens, r.output_tokens, r.ttft, r.tpot) for r in self.lone if r.ok and r.output_tokens > 1]


def warm_up(cfg: BenchConfig, served: Served, sample: Sample, shape: ModelShape, progress: Progress | None) -> WarmUp:
    """Lone requests one after another, then a burst of the same; the lone ones give the served lone latencies
    and, when disaggregated, the KV transfer rate."""
    run = uuid.uuid4().hex[:6]
    n = max(cfg.warmup, 1)
    lone = []
    began = time.time()
    for i in range(n):
        lone += run_requests(served, [single(f"warm-{run}-{i}", sample.prompt_ids[i], 16)], None, "")
    lone_end = time.time()
    burst = [single(f"warm-{run}-b{i}", sample.prompt_ids[i], 16) for i in range(n)]
    run_requests(served, burst, progress, f"{served.mode}: warm-up")
    moved = [(shape.kv_tokens(r.prompt_tokens) * shape.kv_bytes_per_token() * 8, r.stages["transfer"])
             for r in lone if r.stages.get("transfer", 0) > 0]
    gbps = sum(b for b, _ in moved) / sum(s for _, s in moved) / 1e9 if moved else DEFAULT_LINK_GBPS
    return WarmUp(lone, gbps, began, lone_end)


@dataclass(frozen=True, slots=True)
class Calibration:
    overheads: ServingOverheads  # the path's, as the warm-up's lone requests and then the load show them
    began: float  # unix seconds: the fitted model learns from the steps served from then on
    fit: ServedFit  # the model fitted to the load's steps
    joins: Counter[float]  # requests that joined each decode step of the load (`joins_of`)
    prefill_steps: list[tuple[int, int, int, float, float]]  # the load's prefill steps (`prefill_rows`)


def calibrate(served: Served, warm: WarmUp, sample: Sample, rate: float, profiled: TPCoefficients,
              progress: Progress | None) -> Calibration:
    """Serves `sample` at `rate`: the path's overheads (`path_overheads` of the warm-up's lone requests, then
    `loaded_overheads` of this load with the model fitted to its steps)."""
    lone_steps = [s for s in served_steps(served.redis_url, warm.began) if s.start < warm.lone_end]
    lone = path_overheads(warm.lone, lone_steps)
    reqs = sample.conversations(rate, f"calib-{uuid.uuid4().hex[:6]}")
    began = time.time()
    results = run_requests(served, reqs, progress, f"{served.mode}: calibration {rate:.3g} req/s")
    steps = served_steps(served.redis_url, began)
    joins = joins_of(results)
    fit = fit_steps(steps, profiled, joins)
    return Calibration(loaded_overheads(lone, results, steps, fit.join_s), began, fit, joins, prefill_rows(steps))


def served_fit(served: Served, since: float, profiled: TPCoefficients, joins: Counter[float]) -> ServedFit:
    """The latency model fitted to every step the stack served from `since` (unix seconds) on; `joins`: the
    hand-offs of the requests served meanwhile."""
    return fit_steps(served_steps(served.redis_url, since), profiled, joins)


def make_slo(cfg: BenchConfig, sample: Sample, profile: str) -> ScaledSLO:
    """Seconds when given, else scales of the profile's lone-request latencies (either objective may be given alone)."""
    if cfg.ttft is not None and cfg.tpot is not None:
        return ScaledSLO(SLO(cfg.ttft, cfg.tpot, cfg.target), cfg.slo_scale)
    if not profile:
        raise ValueError("an SLO needs --ttft and --tpot in seconds, or a profile for --slo-scale")
    stats = sample.stats()
    base_ttft, base_tpot = lone_latencies(fit_profile(read_profile(profile)).at(1), stats["prompt_mean"], stats["output_mean"])
    slo = scaled_slo(base_ttft, base_tpot, cfg.ttft_scale, cfg.tpot_scale, cfg.slo_scale, cfg.target)
    return replace(slo, base=replace(slo.base, ttft=cfg.ttft or slo.base.ttft, tpot=cfg.tpot or slo.base.tpot))


def bench_sample(cfg: BenchConfig, workload: str, count: int, seed_offset: int = 0) -> Sample:
    """`count` requests of `workload` as the bench draws them (its length scales, arrivals and seed)."""
    shape = load_shape(cfg.model)
    return BenchWorkload(workload, cfg.prompt_scale, cfg.output_scale, shape.max_context, cfg.cv,
                         cfg.seed + seed_offset, cfg.think_s, system_prompts=cfg.system_prompts).sample(count, shape.vocab)


def point_sample(cfg: BenchConfig, sample: Sample) -> Callable[[float], Sample]:
    """The requests a run at a rate sends: those arriving within the window, within the count bounds; with
    `at_knee`, `num_requests` at every rate (a window would cut the low rates' points short)."""
    if cfg.at_knee:
        return lambda rate: sample.head(cfg.num_requests)
    low = min(cfg.min_requests, cfg.num_requests)
    return lambda rate: sample.head(int(np.clip(rate * cfg.window_s, low, cfg.num_requests)))


class Bench:
    """Holds the samples, SLOs and start rates shared by every mode, so modes differ in nothing else."""

    def __init__(self, cfg: BenchConfig, progress: Progress | None = None) -> None:
        self.cfg = cfg
        self.progress = progress
        self.shape = load_shape(cfg.model)
        self.samples = {wl: bench_sample(cfg, wl, cfg.num_requests) for wl in cfg.workloads}
        self.slos = {wl: make_slo(cfg, s, cfg.profile) for wl, s in self.samples.items()}
        self.kv_tokens = cfg.num_blocks * cfg.block_size
        self.start_rates = {wl: self._start_rate(wl) for wl in cfg.workloads}
        # The calibration load: the first workload's lengths, not its measured requests; as many as arrive within
        # a point's window (at least `calibration`), so that a high rate still serves steps for that long.
        first = cfg.workloads[0]
        self.calibration_rate = cfg.calibration_rate or self.start_rates[first]
        count = max(cfg.calibration, math.ceil(self.calibration_rate * cfg.window_s), 1)
        self.calibration_sample = bench_sample(cfg, first, count, seed_offset=1)

    def _predictor(self, link_gbps: float, mode: str = "disagg", caching: str = "off") -> Predictor:
        """The simulator of `mode`; disaggregated with prefix caching on, the sample's shared prefixes are hits."""
        cache_block = self.cfg.block_size if caching == "on" and mode == "disagg" else 0
        return Predictor.from_profile(self.cfg.profile, self.kv_tokens, self.cfg.max_batch_tokens, link_gbps, mode,
                                      cache_block)

    def _start_rate(self, workload: str) -> float:
        if self.cfg.start_rate:
            return self.cfg.start_rate
        if not self.cfg.profile:
            return 1.0
        predictor = self._predictor(DEFAULT_LINK_GBPS, caching=self.cfg.prefix_caching)  # the first variant's
        guess = 0.5 * predictor.goodput(self.sample_at(workload), self.slos[workload])
        return float(f"{max(guess, 0.05):.2g}")

    def sample_at(self, workload: str) -> Callable[[float], Sample]:
        return point_sample(self.cfg, self.samples[workload])

    def run(self) -> list[ModeResult]:
        out = []
        for variant in variants(self.cfg):
            mode = variant.mode
            with serving(self.cfg, variant) as served:
                first = self.samples[self.cfg.workloads[0]]
                warm = warm_up(self.cfg, served, first, self.shape, self.progress)
                predictors: dict[str, Predictor] = {}
                calibration = {}
                fit_since = 0.0  # unix seconds: the fitted model learns from the steps served since then
                joins: Counter[float] = Counter()  # ... and the hand-offs of the requests served since then
                if self.cfg.simulate and mode in PREDICTED_MODES and not variant.devices:  # the profile's devices
                    predictors["simulated"] = self._predictor(warm.link_gbps, mode, variant.prefix_caching)
                    if warm.lone_points():
                        predictors["calibrated"], calibration = predictors["simulated"].calibrated(warm.lone_points())
                    calibration["link_gbps"] = warm.link_gbps
                    calib = calibrate(served, warm, self.calibration_sample, self.calibration_rate,
                                      predictors["simulated"].model.at(1), self.progress)
                    fit_since, joins = calib.began, Counter(calib.joins)
                    predictors["fitted"] = predictors["simulated"].fitted(calib.fit.coeffs, calib.overheads)
                    calibration |= {"calibration_rate": self.calibration_rate, "served_fit": calib.fit.as_dict(),
                                    "overheads": calib.overheads.as_dict(), "prefill_steps": calib.prefill_steps}
                for wl in self.cfg.workloads:
                    result = self.measure(served, wl, predictors, fit_since, joins)
                    result.lone, result.calibration = warm.served_lone(), calibration
                    result.prefix_caching, result.routing = variant.prefix_caching, variant.routing
                    result.device_set = " ".join(served.devices)
                    out.append(result)
        return out

    def overload(self, served: Served, workload: str, knee: float) -> list[OverloadPoint]:
        """The load at each `--overload` multiple of the knee, run with admission off, then (the router restarted
        to refuse) on, with the SLO as metadata throughout (`overload.py`)."""
        slo, devices = self.slos[workload], device_units(served.devices)
        loads = [(m, m * knee, self.sample_at(workload)(m * knee).conversations(m * knee, f"over-{uuid.uuid4().hex[:6]}"))
                 for m in self.cfg.overload]
        out: dict[tuple[float, bool], OverloadPoint] = {}
        for admission in (False, True):
            if admission:
                assert served.stack is not None
                served.stack.restart_router(REFUSE_ENV)
            for multiple, rate, reqs in loads:
                again = renamed(reqs, f"-{'on' if admission else 'off'}")
                label = f"{served.mode} {workload} {multiple:g}x knee, admission {'on' if admission else 'off'}"
                before = scrape(served.router_metrics())
                results = run_requests(served, again, self.progress, label, slo_metadata(slo))
                point = overload_point(multiple, rate, admission, results, slo, devices)
                out[multiple, admission] = replace(point, live=run_errors(before, scrape(served.router_metrics())))
        return [out[m, a] for m in self.cfg.overload for a in (False, True)]

    def measure(self, served: Served, workload: str, predictors: dict[str, Predictor], fit_since: float,
                joins: Counter[float]) -> ModeResult:
        """The sweep (or the fixed rate) of one workload on one served mode. The fitted prediction of a point is
        made from the steps served before it (the calibration load's and the earlier points'); `joins` counts
        their hand-offs and grows with every run."""
        sample, slo, points = self.samples[workload], self.slos[workload], []
        sample_at = self.sample_at(workload)
        run = uuid.uuid4().hex[:6]
        profiled = predictors["simulated"].model.at(1) if predictors else None

        def refit() -> None:
            if "fitted" in predictors:
                fitted, fit = predictors["fitted"], served_fit(served, fit_since, profiled, joins)
                predictors["fitted"] = fitted.fitted(fit.coeffs, replace(fitted.serving, join=fit.join_s))

        def at(rate: float) -> float:
            part = sample_at(rate)
            reqs = part.conversations(rate, f"bench-{run}-{len(points)}")
            refit()
            began, wall = time.time(), time.monotonic()
            label = f"{served.mode} {workload} {rate:.3g} req/s"
            handed: Counter[float] = Counter()  # this point's hand-offs

            live: list[dict] = []  # the router's live model errors of each run

            def run_once(i: int) -> list[RequestResult]:
                again = renamed(reqs, f"-r{i}") if i else reqs
                before = scrape(served.router_metrics()) if served.live else None
                results = run_requests(served, again, self.progress, label + (f" (run {i + 1})" if i else ""),
                                       slo_metadata(slo) if served.live else ())
                if before is not None:
                    live.append(run_errors(before, scrape(served.router_metrics())))
                handed.update(joins_of(results))
                return results

            point, runs = pooled_runs(run_once, lambda results: summarize(rate, results, slo, 0.0), slo.base.attainment,
                                      self.cfg.repeats, self.cfg.repeat_within)
            point.runs, point.wall_s, point.live = runs, time.monotonic() - wall, live
            for kind, predictor in predictors.items():
                setattr(point, f"{kind}_attainment", predictor.attainment(part, rate, slo))
            if "fitted" in predictors:  # the simulator on the point's own served step costs (a diagnostic)
                steps = served_steps(served.redis_url, began)
                own = fit_steps(steps, profiled, handed)
                point.served_fit, point.prefill_steps = own.as_dict(), prefill_rows(steps)
                fitted = predictors["fitted"]
                serving = replace(fitted.serving, join=own.join_s)
                point.replayed_attainment = fitted.fitted(own.coeffs, serving).attainment(part, rate, slo)
            joins.update(handed)
            points.append(point)
            return point.attainment

        fitted_knee = None
        if self.cfg.rate:
            at(self.cfg.rate)
            goodput = self.cfg.rate if points[0].attainment >= slo.base.attainment else 0.0
        elif self.cfg.at_knee:
            refit()
            fitted_knee = predictors["fitted"].goodput(sample_at, slo, self.start_rates[workload])
            base = fitted_knee or self.start_rates[workload]  # no predicted goodput: around the start rate
            goodput = fixed_rates_goodput(at, [m * base for m in self.cfg.at_knee], slo.base.attainment)
        else:
            goodput = goodput_search(at, self.start_rates[workload], slo.base.attainment, self.cfg.factor,
                                     self.cfg.bisect_steps, self.cfg.max_steps)
        refit()  # the goodput and curve of the fitted model: every step served
        devices = device_units(served.devices)  # each core of a multi-core CPU device
        result = ModeResult(served.mode, workload, devices, slo.as_dict(), goodput, goodput / devices,
                            sorted(points, key=lambda p: p.rate), sample.stats(), fitted_knee=fitted_knee)
        if self.cfg.overload and served.mode == "disagg":
            knee = goodput or self.cfg.rate or self.start_rates[workload]  # no goodput: the rate tried
            result.overload = [asdict(p) for p in self.overload(served, workload, knee)]
        for kind, predictor in predictors.items():
            per_device = predictor.goodput(sample_at, slo, self.start_rates[workload]) / devices
            setattr(result, f"{kind}_goodput_per_device", per_device)
            top = max(max(p.rate for p in points), 2 * per_device * devices)
            setattr(result, f"{kind}_curve", [(r, predictor.attainment(sample_at(r), r, slo))
                                               for r in np.linspace(top / 16, top, 16).tolist()])
        return result
