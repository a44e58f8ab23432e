"""Placement search: DistServe Alg. 1 (high node-affinity), Alg. 2 (low node-affinity), and brute force.

Alg. 1 finds the best per-GPU goodput for prefill and for decode independently, then replicates each phase
to the rate (or fills the cluster). Alg. 2 keeps the prefill and decode segments of each pipeline stage on one
node, so the KV cache moves over NVLink, and replicates that unit. Phase goodputs run in parallel processes.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import product

from services.planner.goodput import Scenario, phase_goodput
from services.planner.placement import Parallel, Placement, pack, pack_units


@dataclass(slots=True)
class PlanResult:
    placement: Placement
    prefill_goodput: float  # req/s of one prefill instance
    decode_goodput: float  # req/s of one decode instance
    goodput: float  # req/s of the whole placement, min over the phases
    algorithm: str
    search_seconds: float = 0.0
    evaluated: dict[tuple[str, int, int], float] = field(default_factory=dict)  # (phase, tp, pp) → req/s

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput / self.placement.num_gpus


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidates(scn: Scenario, max_gpus: int) -> list[Parallel]:
    """(tp, pp) with tp within a node dividing the heads, pp dividing the layers, and the model fitting."""
    shape, cluster = scn.model.shape, scn.cluster
    return [Parallel(tp, pp)
            for tp in _divisors(shape.heads, cluster.gpus_per_node)
            for pp in _divisors(shape.layers, max_gpus // tp)
            if scn.fits(Parallel(tp, pp))]


def _evaluate(scn: Scenario, tasks: list[tuple[str, Parallel]], workers: int | None) -> dict:
    """Phase goodput of every (phase, config), across processes when there are several CPU cores."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(tasks) < 2:
        values = [phase_goodput(scn, phase, par) for phase, par in tasks]
    else:
        with ProcessPoolExecutor(min(workers, len(tasks))) as pool:
            values = list(pool.map(phase_goodput, [scn] * len(tasks), *zip(*tasks), chunksize=1))
    return {(phase, par.tp, par.pp): value for (phase, par), value in zip(tasks, values)}


def replicas(g_p: float, gpus_p: int, g_d: float, gpus_d: int, budget: int, rate: float | None) -> tuple[int, int]:
    """Instances per phase: enough for `rate`, or (no rate) the counts within `budget` GPUs with the most
    goodput per GPU (some GPUs may stay idle when a phase's replica would add no goodput)."""
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
    return max(splits, key=lambda s: (min(s[0] * g_p, s[1] * g_d) / (s[0] * gpus_p + s[1] * gpus_d),
                                      -(s[0] * gpus_p + s[1] * gpus_d)))


def high_affinity(scn: Scenario, rate: float | None = None, workers: int | None = None) -> PlanResult:
    """Alg. 1: each phase's goodput per (tp, pp) found independently; the pair and replica counts that give
    the most goodput per GPU (or, with a rate, serve it on the fewest GPUs) win."""
    began = time.perf_counter()
    configs = candidates(scn, scn.cluster.num_gpus)
    goodput = _evaluate(scn, [(phase, c) for phase in ("prefill", "decode") for c in configs], workers)
    best = None
    for par_p, par_d in product(configs, configs):
        g_p, g_d = goodput["prefill", par_p.tp, par_p.pp], goodput["decode", par_d.tp, par_d.pp]
        try:
            n_p, n_d = replicas(g_p, par_p.gpus, g_d, par_d.gpus, scn.cluster.num_gpus, rate)
            placement = pack(scn.cluster, par_p, n_p, par_d, n_d)
        except ValueError:
            continue
        total = min(n_p * g_p, n_d * g_d)
        # With a rate: fewest GPUs; without: most goodput per GPU. Ties go to the fewer GPUs.
        key = (-placement.num_gpus, total) if rate is not None else (total / placement.num_gpus, -placement.num_gpus)
        if best is None or key > best[0]:
            best = (key, PlanResult(placement, g_p, g_d, total, "high-affinity", evaluated=goodput))
    if best is None:
        raise ValueError("slo: no placement on this cluster meets the SLO" + (f" at {rate} req/s" if rate else ""))
    best[1].search_seconds = time.perf_counter() - began
    return best[1]


def unit_configs(scn: Scenario) -> list[tuple[int, Parallel, Parallel]]:
    """Alg. 2's space: `cross` inter-node stages, each a node segment with prefill tp × pp and decode tp × pp."""
    cluster, shape = scn.cluster, scn.model.shape
    per_node = [Parallel(tp, pp) for tp in _divisors(shape.heads, cluster.gpus_per_node)
                for pp in _divisors(shape.layers, cluster.gpus_per_node // tp)]
    out = []
    for cross, seg_p, seg_d in product(_divisors(cluster.nodes, cluster.nodes), per_node, per_node):
        if seg_p.gpus + seg_d.gpus > cluster.gpus_per_node:
            continue
        full_p, full_d = Parallel(seg_p.tp, seg_p.pp * cross), Parallel(seg_d.tp, seg_d.pp * cross)
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
    fulls = {(phase, Parallel(seg.tp, seg.pp * cross))
             for cross, seg_p, seg_d in units for phase, seg in (("prefill", seg_p), ("decode", seg_d))}
    goodput = _evaluate(scn, sorted(fulls, key=lambda t: (t[0], t[1].tp, t[1].pp)), workers)

    def unit_goodput(u: tuple[int, Parallel, Parallel]) -> float:
        cross, seg_p, seg_d = u
        return min(goodput["prefill", seg_p.tp, seg_p.pp * cross], goodput["decode", seg_d.tp, seg_d.pp * cross])

    cross, seg_p, seg_d = max(units, key=lambda u: (unit_goodput(u) / (u[0] * (u[1].gpus + u[2].gpus)),
                                                    -u[0] * (u[1].gpus + u[2].gpus)))
    g = unit_goodput((cross, seg_p, seg_d))
    if g <= 0:
        raise ValueError("slo: no configuration meets the SLO at any rate on this cluster")
    seg = seg_p.gpus + seg_d.gpus
    room = (scn.cluster.nodes // cross) * (scn.cluster.gpus_per_node // seg)
    count = room if rate is None else math.ceil(rate / g)
    if count > room:
        raise ValueError(f"rate: {rate} req/s needs {count} units of {cross * seg} GPUs, the cluster has room for {room}")
    placement = pack_units(scn.cluster, seg_p, seg_d, cross, count)
    p, d = placement.prefill, placement.decode
    return PlanResult(placement, goodput["prefill", p.tp, p.pp], goodput["decode", d.tp, d.pp], count * g,
                      "low-affinity", time.perf_counter() - began, goodput)


def brute_force(scn: Scenario, rate: float) -> Placement | None:
    """The fewest-GPU high-affinity placement whose whole-system simulation meets the SLO at `rate`."""
    configs = candidates(scn, scn.cluster.num_gpus)
    budget = scn.cluster.num_gpus
    options = [(n_p * p.gpus + n_d * d.gpus, p, n_p, d, n_d)
               for p, d in product(configs, configs)
               for n_p in range(1, budget // p.gpus + 1) for n_d in range(1, budget // d.gpus + 1)
               if n_p * p.gpus + n_d * d.gpus <= budget]
    for gpus, p, n_p, d, n_d in sorted(options, key=lambda o: (o[0], o[1].gpus)):
        try:
            placement = pack(scn.cluster, p, n_p, d, n_d)
        except ValueError:  # the GPUs add up but the stages do not fit the nodes
            continue
        if scn.attainment(placement, rate) >= scn.slo.attainment:
            return placement
    return None
