"""Placement search: DistServe Alg. 1 (high node-affinity), Alg. 2 (low node-affinity), and brute force.

Alg. 1 simulates the goodput of prefill and of decode configurations independently, then picks the pair and
replica counts with the best goodput per GPU (or the fewest GPUs for a rate). Alg. 2 keeps the prefill and
decode segments of each pipeline stage on one node, so the KV cache moves over NVLink, and replicates that
unit. Phase goodputs run in parallel processes; the winner is checked in the whole-system simulation.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import product

from services.planner.goodput import Scenario, phase_goodput, placement_goodput
from services.planner.placement import Parallel, Placement, pack, pack_units


@dataclass(slots=True)
class PlanResult:
    placement: Placement
    prefill_goodput: float  # req/s of one prefill instance (phase simulation)
    decode_goodput: float  # req/s of one decode instance (phase simulation)
    estimated_goodput: float  # req/s of the placement from the phase goodputs: min over the phases
    algorithm: str
    simulated_goodput: float = 0.0  # req/s of the placement in the whole-system simulation
    meets_rate: bool | None = None  # with a rate: the whole-system simulation meets the SLO at it
    search_seconds: float = 0.0
    evaluated: dict[tuple[str, Parallel], float] = field(default_factory=dict)  # (phase, layout) → req/s

    @property
    def goodput_per_gpu(self) -> float:
        return self.simulated_goodput / self.placement.num_gpus


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def expert_degrees(scn: Scenario, tp: int, limit: int) -> list[int]:
    """EP degrees for tp: 1 (experts sliced over the tp GPUs), and for a model with routed experts the divisors of
    tp that divide the experts and whose tp / ep GPUs split an expert's width (expert groups inside the instance),
    and the multiples of tp up to `limit` GPUs that divide the experts, within a node or over whole nodes (not
    where the plan must be `launchable`: the engine has no DP attention, so its experts stay within its TP ranks)."""
    shape, per_node = scn.model.shape, scn.cluster.gpus_per_node
    if scn.model.experts is None:
        return [1]
    inside = [ep for ep in range(2, tp) if tp % ep == 0 and shape.experts % ep == 0 and shape.expert_ffn % (tp // ep) == 0]
    limit = tp if scn.launchable else limit
    return [1, *inside] + [ep for ep in range(tp, limit + 1, tp)
                           if ep > 1 and shape.experts % ep == 0 and (ep <= per_node or ep % per_node == 0)]


def rank_layouts(scn: Scenario, per_node: int) -> list[tuple[int, int]]:
    """(tp, cores per rank) of a stage within `per_node` devices: tp dividing the heads, one core per rank or (CPU)
    as many as the latency model has profiles of at that tp (`LatencyModel.threaded`)."""
    return [(tp, threads) for tp in _divisors(scn.model.shape.heads, per_node)
            for threads in scn.model.threads_at(tp) if tp * threads <= per_node]


def candidates(scn: Scenario, max_gpus: int) -> list[Parallel]:
    """(tp, pp, ep, threads) with (tp, threads) as `rank_layouts` within a node, ep as `expert_degrees`, pp dividing
    the layers, and the model fitting."""
    shape, cluster = scn.model.shape, scn.cluster
    return [par for tp, threads in rank_layouts(scn, cluster.gpus_per_node)
            for ep in expert_degrees(scn, tp, max_gpus // threads)
            for pp in _divisors(shape.layers, max_gpus // (max(tp, ep) * threads))
            if scn.fits(par := Parallel(tp, pp, ep, threads))]


def _evaluate(scn: Scenario, tasks: list[tuple[str, Parallel]], workers: int | None) -> dict[tuple[str, Parallel], float]:
    """Phase goodput of every (phase, config), across processes when there are several CPU cores."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(tasks) < 2:
        values = [phase_goodput(scn, phase, par) for phase, par in tasks]
    else:
        # forkserver: the API calls this from a thread of a running server, where fork is unsafe
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context) as pool:
            values = list(pool.map(phase_goodput, [scn] * len(tasks), *zip(*tasks), chunksize=1))
    return dict(zip(tasks, values))


def replicas(g_p: float, gpus_p: int, g_d: float, gpus_d: int, budget: int, rate: float | None) -> tuple[int, int]:
    """Instances per phase: enough for `rate`, or (no rate) the counts within `budget` GPUs with the most
    goodput per GPU, the larger on a tie (GPUs stay idle only where a replica would lower goodput per GPU)."""
    if g_p <= 0 or g_d <= 0:
        raise ValueError("slo: no configuration meets the SLO at any rate on this cluster")
    if rate is not None:
        n_p, n_d = math.ceil(rate / g_p), math.ceil(rate / g_d)
        if n_p * gpus_p + n_d * gpus_d > budget:
            raise ValueError(f"rate: {rate} req/s needs {n_p * gpus_p + n_d * gpus_d} GPUs, the cluster has {budget}")
        return n_p, n_d
    splits = [(n_p, n_d) for n_p in range(1, budget // gpus_p + 1)
              for n_d in range(1, (budget - n_p * gpus_p) // gpus_d + 1)]
    if not splits:
        raise ValueError("cluster: too small for one prefill and one decode instance")
    return max(splits, key=lambda s: (round(min(s[0] * g_p, s[1] * g_d) / (s[0] * gpus_p + s[1] * gpus_d), 9),
                                      s[0] * gpus_p + s[1] * gpus_d))


def high_affinity(scn: Scenario, rate: float | None = None, workers: int | None = None) -> PlanResult:
    """Alg. 1: each phase's goodput per (tp, pp) found independently; the pair and replica counts that give
    the most goodput per GPU (or, with a rate, serve it on the fewest GPUs) win."""
    began = time.perf_counter()
    configs = candidates(scn, scn.cluster.num_gpus)
    goodput = _evaluate(scn, [(phase, c) for phase in ("prefill", "decode") for c in configs], workers)
    ranked = []
    for par_p, par_d in product(configs, configs):
        g_p, g_d = goodput["prefill", par_p], goodput["decode", par_d]
        try:
            n_p, n_d = replicas(g_p, par_p.gpus, g_d, par_d.gpus, scn.cluster.num_gpus, rate)
            placement = pack(scn.cluster, par_p, n_p, par_d, n_d)
        except ValueError:
            continue
        ranked.append(PlanResult(placement, g_p, g_d, min(n_p * g_p, n_d * g_d), "high-affinity", evaluated=goodput))
    return _choose(scn, ranked, rate, began)


def _choose(scn: Scenario, ranked: list[PlanResult], rate: float | None, began: float,
            verify: int = 8) -> PlanResult:
    """The best candidate by its phase estimate (with a rate: fewest GPUs; else most goodput per GPU, then the
    most GPUs), checked in the whole-system simulation: with a rate, the first of the best `verify` that meets
    it there wins. The reported goodput is always the whole-system simulation's."""
    if not ranked:
        raise ValueError(f"rate: no placement on this cluster meets the SLO at {rate} req/s" if rate
                         else "slo: no placement on this cluster meets the SLO at any rate")
    if rate is None:
        ranked.sort(key=lambda r: (-round(r.estimated_goodput / r.placement.num_gpus, 9), -r.placement.num_gpus))
        chosen = ranked[0]
    else:
        ranked.sort(key=lambda r: (r.placement.num_gpus, -r.estimated_goodput))
        passing = (r for r in ranked[:verify] if scn.attainment(r.placement, rate) >= scn.slo.attainment)
        chosen = next(passing, None)
        if chosen is None:
            chosen = ranked[0]
            chosen.meets_rate = False
        else:
            chosen.meets_rate = True
    chosen.simulated_goodput = placement_goodput(scn, chosen.placement, guess=max(chosen.estimated_goodput, 0.1))
    chosen.search_seconds = time.perf_counter() - began
    return chosen


def unit_configs(scn: Scenario) -> list[tuple[int, Parallel, Parallel]]:
    """Alg. 2's space: `cross` inter-node stages, each a node segment with prefill and decode layouts (tp, pp, ep)."""
    cluster, shape = scn.cluster, scn.model.shape
    per_node = [Parallel(tp, pp, ep, threads) for tp, threads in rank_layouts(scn, cluster.gpus_per_node)
                for ep in expert_degrees(scn, tp, cluster.gpus_per_node // threads)
                for pp in _divisors(shape.layers, cluster.gpus_per_node // (max(tp, ep) * threads))]
    out = []
    for cross, seg_p, seg_d in product(_divisors(cluster.nodes, cluster.nodes), per_node, per_node):
        if seg_p.gpus + seg_d.gpus > cluster.gpus_per_node:
            continue
        full_p, full_d = replace(seg_p, pp=seg_p.pp * cross), replace(seg_d, pp=seg_d.pp * cross)
        if shape.layers % full_p.pp or shape.layers % full_d.pp or not (scn.fits(full_p) and scn.fits(full_d)):
            continue
        out.append((cross, seg_p, seg_d))
    return out


def low_affinity(scn: Scenario, rate: float | None = None, workers: int | None = None) -> PlanResult:
    """Alg. 2: the best unit (prefill and decode segments sharing nodes) by goodput per GPU, replicated."""
    began = time.perf_counter()
    units = unit_configs(scn)
    if not units:
        raise ValueError("cluster: the model fits no node-local prefill + decode segment")
    fulls = {(phase, replace(seg, pp=seg.pp * cross))
             for cross, seg_p, seg_d in units for phase, seg in (("prefill", seg_p), ("decode", seg_d))}
    goodput = _evaluate(scn, sorted(fulls, key=lambda t: (t[0], t[1].tp, t[1].pp, t[1].ep, t[1].threads)), workers)

    cluster, ranked = scn.cluster, []
    for cross, seg_p, seg_d in units:
        g_p = goodput["prefill", replace(seg_p, pp=seg_p.pp * cross)]
        g_d = goodput["decode", replace(seg_d, pp=seg_d.pp * cross)]
        g = min(g_p, g_d)
        room = (cluster.nodes // cross) * (cluster.gpus_per_node // (seg_p.gpus + seg_d.gpus))
        if g <= 0:
            continue
        counts = range(1, room + 1) if rate is None else [math.ceil(rate / g)]
        for count in counts:
            if count <= room:
                ranked.append(PlanResult(pack_units(cluster, seg_p, seg_d, cross, count), g_p, g_d, count * g,
                                         "low-affinity", evaluated=goodput))
    return _choose(scn, ranked, rate, began)
