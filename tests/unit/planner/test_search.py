"""Placement search: Alg. 1 and Alg. 2 against brute force, and the DistServe authors' reference result."""

import pytest

from services.common.slo import SLO
from services.planner.goodput import Scenario
from services.planner.hardware import load_latency_model
from services.planner.placement import Cluster, Parallel
from services.planner.prefix import PrefixHits
from services.planner.search import high_affinity, low_affinity
from services.planner.shapes import load_shape
from services.planner.workload import Workload
from tests.unit.planner.brute_force import brute_force, high_affinity_layouts, low_affinity_layouts

OPT13B = load_latency_model("a100-80gb", load_shape("opt-13b"))


def _scenario(cluster: Cluster, num_requests: int = 300) -> Scenario:
    """Runs of at most 1000 requests keep these tests quick."""
    return Scenario(OPT13B, cluster, Workload("chatbot"), SLO(0.2, 0.1, 0.9), num_requests=num_requests,
                    max_requests=1000)


@pytest.mark.parametrize("cluster", [Cluster(1, 4), Cluster(2, 4, inter_node_gbps=25)])
@pytest.mark.parametrize("rate", [3.0, 12.0])
@pytest.mark.parametrize("algorithm, layouts", [(high_affinity, high_affinity_layouts),
                                                (low_affinity, low_affinity_layouts)])
def test_algorithms_need_as_few_gpus_as_brute_force(cluster, rate, algorithm, layouts):
    scn = _scenario(cluster)
    best = brute_force(scn, rate, layouts(scn))
    if best is None:
        with pytest.raises(ValueError, match="slo|rate"):
            algorithm(scn, rate, workers=1)
        return
    plan = algorithm(scn, rate, workers=1)
    assert plan.meets_rate
    assert plan.placement.num_gpus == best.num_gpus


def test_reference_result_opt13b_one_node_of_four_a100():
    """The authors' simulator: prefill TP 2, decode TP 1, 1.56 req/s per GPU (one 300-request sample, a
    bisection that stops 0.25 req/s wide). Ours, over three request samples of 2000: about 1.7 (docs/planner.md)."""
    per_gpu = []
    for seed in range(3):
        scn = Scenario(OPT13B, Cluster(1, 4), Workload("chatbot"), SLO(0.2, 0.1, 0.9), num_requests=2000, seed=seed)
        plan = high_affinity(scn, workers=2)
        p = plan.placement
        assert (p.prefill, p.decode, p.n_prefill, p.n_decode) == (Parallel(2, 1), Parallel(1, 1), 1, 1)
        per_gpu.append(plan.goodput_per_gpu)
    assert sum(per_gpu) / 3 == pytest.approx(1.56, rel=0.12)


def test_search_runs_the_same_across_processes():
    scn = _scenario(Cluster(1, 4))
    serial, parallel = high_affinity(scn, workers=1), high_affinity(scn, workers=2)
    assert parallel.evaluated == serial.evaluated
    assert parallel.placement == serial.placement


def test_every_instance_gets_distinct_gpus_on_real_nodes():
    plan = low_affinity(_scenario(Cluster(2, 4, inter_node_gbps=25)), workers=1)
    gpus = [(s.node, g) for inst in plan.placement.instances for s in inst.stages for g in s.gpus]
    assert len(gpus) == len(set(gpus)) == plan.placement.num_gpus
    assert all(0 <= node < 2 and 0 <= g < 4 for node, g in gpus)
    for prefill, decode in zip(plan.placement.of_role("prefill"), plan.placement.of_role("decode")):
        assert prefill.nodes == decode.nodes  # Alg. 2: KV moves inside a node


def test_a_cluster_too_small_for_the_model_is_refused():
    scn = Scenario(load_latency_model("a100-80gb", load_shape("opt-66b")), Cluster(1, 1), Workload("chatbot"),
                   SLO(2.5, 0.15, 0.9), num_requests=200)
    with pytest.raises(ValueError, match="slo|cluster"):
        high_affinity(scn, workers=1)


def test_a_workload_with_a_high_hit_rate_needs_fewer_prefill_gpus_for_the_same_rate():
    plans = []
    for hits in (None, PrefixHits((), ((0.8,),))):  # every prompt 80 % cached
        scn = Scenario(OPT13B, Cluster(1, 4), Workload("chatbot", hits=hits), SLO(0.2, 0.1, 0.9), num_requests=300,
                       max_requests=1000)
        plans.append(high_affinity(scn, 4.0, workers=1))
    cold, warm = plans
    assert cold.meets_rate and warm.meets_rate
    assert warm.prefill_goodput > 2 * cold.evaluated["prefill", Parallel()]  # the same instance serves more than twice
    assert warm.placement.n_prefill * warm.placement.prefill.gpus < cold.placement.n_prefill * cold.placement.prefill.gpus
    assert warm.decode_goodput == cold.decode_goodput  # decode holds the whole context either way
