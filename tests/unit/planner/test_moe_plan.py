"""The planner for mixture-of-experts models: the expert spread of a batch in the latency model, expert
parallelism in the search, and a DeepSeek-V3 plan on four nodes of eight A100-80GB."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.slo import SLO
from services.common.step_model.experts import ExpertCost, ExpertSpread, Fabric, active_experts
from services.planner.actuation import specs_of
from services.planner.goodput import Scenario, phase_goodput
from services.planner.hardware import load_latency_model
from services.planner.placement import Cluster, Parallel, pack
from services.planner.search import candidates, high_affinity
from services.planner.service import memory_dict
from services.planner.shapes import load_shape
from services.planner.workload import Workload

SLO_ = SLO(0.2, 0.1, 0.9)


def test_a_batch_activates_k_experts_per_token_until_every_expert_is_active() -> None:
    assert active_experts(256, 8, 1) == pytest.approx(8)
    assert active_experts(256, 8, 2) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))  # 15.75: some overlap
    assert active_experts(256, 8, 512) == pytest.approx(256, rel=1e-6)
    cost = ExpertCost(256, 8, 58, read_s=1e-3, token_s=1e-7, token_bytes=14336)
    sliced = ExpertSpread(cost, width=8, groups=1)
    steps = [sliced.seconds(b) for b in (1, 8, 64, 512)]
    assert steps == sorted(steps) and steps[0] == pytest.approx(8 * 1e-3 / 8)  # each active expert read once
    assert steps[3] == pytest.approx(256 * 1e-3 / 8, rel=1e-3)  # every expert read: the read stops growing


def test_under_ep_the_busiest_gpu_and_the_all_to_all_over_the_links_add_to_the_step() -> None:
    cost = ExpertCost(256, 8, 58, read_s=1e-3, token_s=1e-7, token_bytes=14336, imbalance=1.3)
    fabric = Fabric(8, 2400.0, 200.0)
    node = ExpertSpread(cost, 8, 8, fabric.seconds_per_byte(8))
    two_nodes = ExpertSpread(cost, 16, 16, fabric.seconds_per_byte(16))
    assert node.seconds(1) > 1.3 * ExpertSpread(cost, 8, 1).seconds(1)  # imbalance and the all-to-all
    assert fabric.seconds_per_byte(16) > 5 * fabric.seconds_per_byte(8)  # half of it crosses the slower link
    assert two_nodes.seconds(64) - two_nodes.seconds(32) > 0


@pytest.fixture(scope="module")
def deepseek() -> Scenario:
    model = load_latency_model("a100-80gb", load_shape("deepseek-v3"))
    return Scenario(model, Cluster(4, 8), Workload("chatbot"), SLO_, num_requests=500)


def test_deepseek_v3_fits_four_nodes_of_eight_a100s_only_with_its_experts_spread_over_two_nodes(deepseek) -> None:
    layouts = candidates(deepseek, deepseek.cluster.num_gpus)
    assert layouts and all(par.ep >= 16 for par in layouts)  # one node (TP 8, no EP) holds 84 GB per GPU
    assert deepseek.model.weight_bytes_per_gpu(8, 1, 1) > 80e9


def test_a_launchable_search_keeps_the_experts_within_each_instances_tp_ranks(deepseek) -> None:
    """What a replanner with an actuator searches: no DP attention (ep > tp), so DeepSeek-V3 fits nowhere on
    4 x 8 A100s; Mixtral 8x7B's layouts all keep ep dividing tp, and the replanner asks for that."""
    assert not candidates(replace(deepseek, launchable=True), deepseek.cluster.num_gpus)
    mixtral = Scenario(load_latency_model("a100-80gb", load_shape("mixtral-8x7b")), Cluster(1, 8), Workload("chatbot"),
                       SLO_, num_requests=500)
    every = candidates(mixtral, 8)
    launchable = candidates(replace(mixtral, launchable=True), 8)
    assert any(par.ep > par.tp for par in every)
    assert launchable and all(par.tp % par.ep == 0 for par in launchable)
    assert set(launchable) == {par for par in every if par.tp % par.ep == 0}


def test_a_latent_is_copied_on_every_tensor_parallel_rank_so_data_parallel_attention_holds_more_kv(deepseek) -> None:
    model = deepseek.model
    free = [16 * 0.9 * 80e9 - 16 * model.weight_bytes_per_gpu(tp, 1, 16) for tp in (1, 8)]
    assert model.kv_capacity(1, 1, 16) == pytest.approx(free[0] / 70272, abs=1)  # 61 layers x 576 values x 2 bytes
    assert model.kv_capacity(8, 1, 16) == pytest.approx(free[1] / (8 * 70272), abs=1)


def test_deepseek_v3_plan_decodes_with_expert_parallelism_and_fits_the_memory(deepseek) -> None:
    plan = high_affinity(deepseek, workers=1)
    p = plan.placement
    assert p.decode.ep > 1 and p.num_gpus <= 32 and plan.simulated_goodput > 0
    longest = int((deepseek.pool[0] + deepseek.pool[1]).max())
    for par in (p.prefill, p.decode):
        held = memory_dict(deepseek, par)
        assert held["weights_gb_per_gpu"] < 0.9 * 80 and held["kv_tokens"] >= longest
    assert all(len({s.node for s in inst.stages}) == 2 for inst in p.instances)  # EP 16: two whole nodes each


def test_decode_goodput_per_gpu_of_ep_and_no_ep_is_ordered_as_the_step_model_predicts() -> None:
    """Mixtral 8x7B on one node: TP 8 without EP, TP 4 without EP, TP 1 with EP 8 (attention data-parallel), TP 8
    with EP 8. The step model's prediction: decode tokens per second per GPU at the largest batch whose step meets
    the TPOT objective (and whose KV fits); the simulated goodput per GPU must rank the layouts the same."""
    model = load_latency_model("a100-80gb", load_shape("mixtral-8x7b"))
    scn = Scenario(model, Cluster(1, 8), Workload("chatbot"), SLO_, num_requests=500)
    prompts, outputs, _ = scn.pool
    context = float(prompts.mean() + outputs.mean() / 2)

    def predicted(par: Parallel) -> float:
        coeffs, room = scn.coeffs(par), model.kv_capacity(par.tp, par.pp, par.ep)
        batch = 1
        while coeffs.decode_time(int((batch + 1) * context), batch + 1) <= SLO_.tpot and (batch + 1) * context <= room:
            batch += 1
        return batch / coeffs.decode_time(int(batch * context), batch) / par.gpus

    layouts = [Parallel(8, 1, 1), Parallel(4, 1, 1), Parallel(1, 1, 8), Parallel(8, 1, 8)]
    simulated = {par: phase_goodput(scn, "decode", par) / par.gpus for par in layouts}
    assert sorted(layouts, key=predicted) == sorted(layouts, key=simulated.__getitem__)
    assert simulated[Parallel(1, 1, 8)] > simulated[Parallel(8, 1, 1)]  # EP with data-parallel attention wins


def test_fewer_expert_groups_than_tp_run_more_smaller_products_for_less_imbalance() -> None:
    """Mixtral 8x7B at TP 8 on A100s: the search offers EP 1, 2, 4 (expert groups inside the instance) and 8 (whole
    experts). A decode step of 8 tokens is fastest with 4 groups (fewer products per GPU than EP 1, less skew and
    no all-to-all against EP 8); a 4096-token prefill with one group (balanced compute)."""
    model = load_latency_model("a100-80gb", load_shape("mixtral-8x7b"))
    scn = Scenario(model, Cluster(1, 8), Workload("chatbot"), SLO_, num_requests=100)
    assert sorted({par.ep for par in candidates(scn, 8) if par.tp == 8}) == [1, 2, 4, 8]
    decode, prefill = ({ep: model.at(8, 1, ep).expert_time(tokens) for ep in (1, 2, 4, 8)} for tokens in (8, 4096))
    assert min(decode, key=decode.__getitem__) == 4 and decode[1] > decode[4] < decode[8]
    assert min(prefill, key=prefill.__getitem__) == 1 and prefill == dict(sorted(prefill.items(), key=lambda i: i[1]))


def test_a_plan_whose_experts_spread_wider_than_its_tp_is_refused_by_the_actuator() -> None:
    cluster = Cluster(4, 8)
    assert len(specs_of(pack(cluster, Parallel(8, 1, 8), 1, Parallel(8, 1, 8), 1))) == 2  # the engine's EP = TP
    prefill, decode = specs_of(pack(cluster, Parallel(8, 1, 2), 1, Parallel(8, 1, 1), 1))  # expert TP inside
    assert prefill.parallel_flags() == ["--tp", "8", "--pp", "1", "--ep", "2"] and decode.ep == 1
    with pytest.raises(ValueError, match="decode EP 16 over TP 1"):
        specs_of(pack(cluster, Parallel(8, 1, 8), 1, Parallel(1, 1, 16), 1))


def test_a_tabled_kv_capacity_holds_for_any_expert_groups_inside_the_tp_instance() -> None:
    model = replace(load_latency_model("a100-80gb", load_shape("mixtral-8x7b")), kv_tokens={(4, 1): 1000})
    assert [model.kv_capacity(4, 1, ep) for ep in (1, 2, 4, 8)] == [1000, 1000, 1000, 0]  # ep 8: data-parallel
