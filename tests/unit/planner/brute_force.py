"""The test oracle for the placement search: every layout of each algorithm's space, simulated whole, fewest GPUs
first (tests/unit/planner/test_search.py checks Alg. 1 and Alg. 2 need no more GPUs than it finds)."""

from __future__ import annotations

from itertools import product

from services.planner.goodput import Scenario
from services.planner.placement import Placement, pack, pack_units
from services.planner.search import candidates, unit_configs


def high_affinity_layouts(scn: Scenario) -> list[Placement]:
    """Every placement of Alg. 1's space (config pair × replica counts) that fits the cluster."""
    configs, budget = candidates(scn, scn.cluster.num_gpus), scn.cluster.num_gpus
    out = []
    for p, d in product(configs, configs):
        for n_p, n_d in product(range(1, budget // p.gpus + 1), range(1, budget // d.gpus + 1)):
            if n_p * p.gpus + n_d * d.gpus <= budget:
                try:
                    out.append(pack(scn.cluster, p, n_p, d, n_d))
                except ValueError:  # the GPUs add up but the stages do not fit the nodes
                    continue
    return out


def low_affinity_layouts(scn: Scenario) -> list[Placement]:
    """Every placement of Alg. 2's space (unit layout × unit count) that fits the cluster."""
    cluster = scn.cluster
    return [pack_units(cluster, seg_p, seg_d, cross, count)
            for cross, seg_p, seg_d in unit_configs(scn)
            for count in range(1, (cluster.nodes // cross) * (cluster.gpus_per_node // (seg_p.gpus + seg_d.gpus)) + 1)]


def brute_force(scn: Scenario, rate: float, layouts: list[Placement]) -> Placement | None:
    """The fewest-GPU layout whose whole-system simulation (transfers included) meets the SLO at `rate`."""
    for placement in sorted(layouts, key=lambda p: (p.num_gpus, p.prefill.gpus, p.decode.gpus)):
        if scn.attainment(placement, rate) >= scn.slo.attainment:
            return placement
    return None
