"""Planning and simulation requests in, JSON-ready answers out: the core behind the REST API and the CLI."""

from __future__ import annotations

import numpy as np

from services.common.registry import Registry
from services.common.slo import SLO
from services.common.step_model.profile_fit import fit_profile, read_profile
from services.common.step_model.stored import describe, with_fit
from services.planner.config import PlannerSettings
from services.planner.goodput import Scenario
from services.planner.hardware import load_latency_model
from services.planner.online_fit import OnlineFit
from services.planner.placement import Cluster, Parallel, Placement, pack
from services.planner.prefix import PrefixHits, hit_rate
from services.planner.records import RecordedWorkload
from services.planner.schemas import (
    PlanRequest,
    PrefixHitsBody,
    ReplanRequest,
    SimulateRequest,
    WorkloadBody,
)
from services.planner.search import PlanResult, high_affinity, low_affinity
from services.planner.shapes import load_shape
from services.planner.simulator import simulate
from services.planner.workload import Workload, length_stats, unit_arrivals

ALGORITHMS = {"high-affinity": high_affinity, "low-affinity": low_affinity}


def hits_of(body: PrefixHitsBody | None) -> PrefixHits | None:
    return None if body is None else PrefixHits(tuple(body.edges), tuple(tuple(q) for q in body.quantiles))


def workload_of(body: WorkloadBody) -> Workload:
    hits = hits_of(body.prefix_hits)
    if body.name is not None:
        return Workload(body.name, hits=hits)
    if body.lengths is not None:
        return Workload("recorded", recorded=tuple(body.lengths), hits=hits)
    return Workload("fixed", input_len=body.input_len, output_len=body.output_len, hits=hits)


def scenario_of(req: PlanRequest | SimulateRequest, fit: dict | None = None) -> Scenario:
    """The scenario of a request; with `fit` (the stored online fit) its phases replace the hardware's."""
    shape = load_shape(req.model)
    cluster = Cluster(**req.cluster.model_dump())
    model = load_latency_model(req.hardware, shape, cluster.gpu_memory_gb)
    if fit is not None:
        model = with_fit(model, fit)
    workload = workload_of(req.workload)
    longest = shape.max_context
    if workload.name == "fixed" and workload.input_len + workload.output_len > longest:
        raise ValueError(f"workload: input_len + output_len exceeds the model's context of {longest}")
    slo = SLO(req.slo.ttft, req.slo.tpot, req.slo.attainment)
    return Scenario(model, cluster, workload, slo, req.num_requests, req.seed, req.workload.arrival_cv,
                    launchable=req.launchable)


def placement_dict(placement: Placement) -> list[dict]:
    """Per instance: role, index, and each pipeline stage's node and GPU ids."""
    return [{"role": inst.role, "index": inst.index, "node": inst.stages[0].node,
             "gpus": [g for s in inst.stages for g in s.gpus],
             "stages": [{"node": s.node, "gpus": list(s.gpus)} for s in inst.stages]}
            for inst in placement.instances]


def memory_dict(scn: Scenario, par: Parallel) -> dict:
    """What one GPU of an instance of `par` holds: its weights, and the KV cache the rest leaves room for."""
    model = scn.model
    return {"gpus_per_instance": par.gpus, "weights_gb_per_gpu": model.weight_bytes_per_gpu(par.tp, par.pp, par.ep) / 1e9,
            "kv_tokens": model.kv_capacity(par.tp, par.pp, par.ep, par.threads)}


def layouts_dict(result: PlanResult, phase: str) -> list[dict]:
    """Why a phase's layout won: every layout the search simulated for it, by goodput per device (GPU or core)."""
    rows = [{"tp": par.tp, "pp": par.pp, "ep": par.ep, "threads": par.threads, "devices": par.gpus,
             "goodput": g, "goodput_per_device": g / par.gpus}
            for (ph, par), g in result.evaluated.items() if ph == phase]
    return sorted(rows, key=lambda r: (-r["goodput_per_device"], r["devices"]))


def plan_dict(req: PlanRequest, result: PlanResult, scn: Scenario) -> dict:
    p = result.placement
    return {
        "model": req.model, "hardware": req.hardware, "algorithm": result.algorithm,
        "prefill": {"tp": p.prefill.tp, "pp": p.prefill.pp, "ep": p.prefill.ep, "threads": p.prefill.threads,
                    "replicas": p.n_prefill, "goodput": result.prefill_goodput, **memory_dict(scn, p.prefill),
                    "layouts": layouts_dict(result, "prefill")},
        "decode": {"tp": p.decode.tp, "pp": p.decode.pp, "ep": p.decode.ep, "threads": p.decode.threads,
                   "replicas": p.n_decode, "goodput": result.decode_goodput, **memory_dict(scn, p.decode),
                   "layouts": layouts_dict(result, "decode")},
        "goodput": result.simulated_goodput,
        "goodput_per_gpu": result.goodput_per_gpu,
        "estimated_goodput_per_gpu": result.estimated_goodput / p.num_gpus,
        "num_gpus": p.num_gpus,
        "hit_rate": hit_rate(scn.pool[0], scn.cached),
        "rate": req.rate, "meets_rate": result.meets_rate,
        "search_seconds": result.search_seconds,
        "instances": placement_dict(p),
        "request": req.model_dump(mode="json"),
        "latency_model": describe(scn.model),
    }


def run_plan(req: PlanRequest, workers: int | None = None, fit: dict | None = None) -> tuple[dict, PlanResult, Scenario]:
    """The plan of a request; with `fit` (the stored online fit), planned with the stack's own model."""
    scn = scenario_of(req, fit)
    result = ALGORITHMS[req.algorithm](scn, req.rate, workers=workers)
    return plan_dict(req, result, scn), result, scn


def placement_of(req: SimulateRequest, scn: Scenario) -> Placement:
    """The placement a simulate request names; ValueError naming the field where an EP degree is not one."""
    pre, dec = req.placement.prefill, req.placement.decode
    experts = scn.model.shape.experts
    for field, phase in (("placement.prefill", pre), ("placement.decode", dec)):
        if phase.ep > 1 and (not experts or (phase.ep % phase.tp and phase.tp % phase.ep) or experts % phase.ep):
            raise ValueError(f"{field}.ep: a divisor or a multiple of tp dividing the routed experts "
                             f"({experts or 'none'})")
        if phase.threads not in scn.model.threads_at(phase.tp):
            raise ValueError(f"{field}.threads: the hardware's profiles have TP {phase.tp} on "
                             f"{', '.join(map(str, scn.model.threads_at(phase.tp)))} cores per rank")
    return pack(scn.cluster, Parallel(pre.tp, pre.pp, pre.ep, pre.threads), pre.replicas,
                Parallel(dec.tp, dec.pp, dec.ep, dec.threads), dec.replicas)


def run_simulate(req: SimulateRequest) -> dict:
    scn = scenario_of(req)
    placement = placement_of(req, scn)
    shape = scn.model.shape
    for field, par in (("placement.prefill", placement.prefill), ("placement.decode", placement.decode)):
        if shape.heads % par.tp or shape.layers % par.pp:
            raise ValueError(f"{field}: tp must divide {shape.heads} heads and pp {shape.layers} layers")
        if not scn.fits(par):
            raise ValueError(f"{field}: tp {par.tp} × pp {par.pp} cannot hold the model and the longest request")
    rng = np.random.default_rng(req.seed)
    prompts, outputs = scn.workload.sample(req.num_requests, rng)
    arrivals = unit_arrivals(req.num_requests, rng, req.workload.arrival_cv) / req.rate
    cached = scn.workload.cached(prompts, np.random.default_rng([req.seed, 1]))
    result = simulate(scn.model, placement, scn.cluster, prompts, outputs, arrivals, cached=cached)
    return {**result.summary(scn.slo), "num_requests": req.num_requests, "rate": req.rate,
            "workload": {**length_stats(prompts, outputs), "hit_rate": hit_rate(prompts, cached)},
            "instances": placement_dict(placement)}


def replan_request(req: ReplanRequest, recorded: RecordedWorkload) -> PlanRequest:
    """A plan request for the recorded lengths, prefix hits, burstiness and (unless given) rate."""
    hits = recorded.workload.hits
    workload = WorkloadBody(lengths=list(recorded.workload.recorded), arrival_cv=min(max(recorded.arrival_cv, 0.05), 10.0),
                            prefix_hits=None if hits is None else PrefixHitsBody(**hits.as_dict()))
    rate = req.rate or (recorded.rate if np.isfinite(recorded.rate) else None)
    fields = req.model_dump(exclude={"max_records", "rate"})
    return PlanRequest(**fields, workload=workload, rate=rate)


def online_fit_of(settings: PlannerSettings) -> OnlineFit:
    """The online fit of the planner service: the registered instances of its Redis, seeded by its profile."""
    seed = fit_profile(read_profile(settings.model_profile)).at(1) if settings.model_profile else None
    return OnlineFit(Registry.from_url(settings.redis_url), seed, f"profile:{settings.model_profile}" if seed else "",
                     settings.fit_window_s, settings.fit_max_steps)
