"""The simulator against the paper's M/D/1 closed forms (§3.1) and the behaviours a deployment shows."""

import numpy as np
import pytest

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.planner.placement import Cluster, Parallel, pack, pack_units
from services.planner.serving import ServingOverheads
from services.planner.shapes import PRESETS
from services.planner.simulator import (
    SLO,
    simulate,
    simulate_decode,
    simulate_prefill,
    transfer_seconds,
)
from services.planner.workload import unit_arrivals

D, K, L, N = 0.1, 1.6, 512, 150000  # execution time of one request, intra-op speed-up, prompt length
NO_DECODE = DecodeCoeffs(0.0, 0.0, 0.0)


def _constant(seconds: float) -> TPCoefficients:
    return TPCoefficients(PrefillCoeffs(seconds, 0.0, 0.0), NO_DECODE, NO_DECODE)


def _mean_ttft(coeffs: TPCoefficients, pp: int, rate: float) -> float:
    arrivals = unit_arrivals(N, np.random.default_rng(7)) / rate
    return float(simulate_prefill(coeffs, pp, L, np.full(N, L), arrivals).mean())  # Lm = L: no batching


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.65, 0.8])
def test_mdl_closed_forms_within_3_percent(rho):
    lam = rho / D
    eq1 = D + lam * D * D / (2 * (1 - lam * D))  # one device
    eq2 = D + lam * D * D / (4 * (2 - lam * D))  # 2-way inter-op: two stages of D/2
    eq3 = D / K + lam * D * D / (2 * K * (K - lam * D))  # 2-way intra-op with speed-up K
    assert _mean_ttft(_constant(D), 1, lam) == pytest.approx(eq1, rel=0.03)
    assert _mean_ttft(_constant(D), 2, lam) == pytest.approx(eq2, rel=0.03)
    assert _mean_ttft(_constant(D / K), 1, lam) == pytest.approx(eq3, rel=0.03)


def test_prefill_batches_queued_prompts_up_to_lm():
    coeffs = TPCoefficients(PrefillCoeffs(0.05, 1e-4, 0.0), NO_DECODE, NO_DECODE)
    arrivals = np.array([0.0, 0.001, 0.002, 0.003])
    ttft = simulate_prefill(coeffs, 1, 256, np.full(4, 100), arrivals)
    # the first runs alone; the next two (200 tokens ≤ Lm 256) share a batch; the fourth waits for them
    first = 0.05 + 0.01
    assert ttft[0] == pytest.approx(first)
    assert ttft[1] + arrivals[1] == pytest.approx(ttft[2] + arrivals[2])
    assert ttft[1] + arrivals[1] == pytest.approx(first + 0.05 + 0.02)
    assert ttft[3] + arrivals[3] == pytest.approx(first + 0.07 + 0.06)


def test_decode_kv_capacity_makes_requests_wait():
    coeffs = TPCoefficients(PrefillCoeffs(0, 0, 0), DecodeCoeffs(0.01, 0.0, 0.0), DecodeCoeffs(0.01, 0.0, 0.0))
    prompts, outputs, arrivals = np.full(4, 90), np.full(4, 11), np.zeros(4)
    roomy = simulate_decode(coeffs, 1, 10000, prompts, outputs, arrivals)
    tight = simulate_decode(coeffs, 1, 202, prompts, outputs, arrivals)  # room for two requests of 101 tokens
    assert roomy == pytest.approx([0.01] * 4)  # continuous batching: all four decode together, 10 steps
    assert sorted(tight) == pytest.approx([0.01, 0.01, 0.02, 0.02])


def _model() -> LatencyModel:
    coeffs = TPCoefficients(PrefillCoeffs(0.02, 1e-5, 0.0), DecodeCoeffs(0.01, 1e-7, 1e-4),
                            DecodeCoeffs(0.01, 1e-7, 1e-4))
    return LatencyModel(PRESETS["opt-13b"], {1: coeffs}, source="test", kv_tokens={(1, 1): 100000, (2, 1): 100000})


def test_transfer_over_the_inter_node_link_costs_tpot_not_ttft():
    model, rng = _model(), np.random.default_rng(0)
    prompts, outputs = np.full(200, 1000), np.full(200, 20)
    arrivals = unit_arrivals(200, rng) / 5
    near = pack_units(Cluster(1, 2), Parallel(1, 1), Parallel(1, 1), 1, 1)
    far = pack(Cluster(2, 1, inter_node_gbps=10), Parallel(1, 1), 1, Parallel(1, 1), 1)
    slow = transfer_seconds(1000, model.shape.kv_bytes_per_token(), *far.instances, Cluster(2, 1, inter_node_gbps=10))
    assert slow == pytest.approx(1000 * 819200 * 8 / 10e9)
    a = simulate(model, near, Cluster(1, 2), prompts, outputs, arrivals)
    b = simulate(model, far, Cluster(2, 1, inter_node_gbps=10), prompts, outputs, arrivals)
    assert b.ttft == pytest.approx(a.ttft)
    assert b.tpot.mean() > a.tpot.mean() + slow / 19 * 0.9


def test_more_instances_serve_more_and_summary_reports_percentiles():
    model = _model()
    prompts, outputs = np.full(2000, 1500), np.full(2000, 50)
    arrivals = unit_arrivals(2000, np.random.default_rng(1)) / 40  # one prefill instance is 40% overloaded
    slo = SLO(0.2, 0.05, 0.9)
    one = simulate(model, pack(Cluster(1, 4), Parallel(1, 1), 1, Parallel(1, 1), 1), Cluster(1, 4),
                   prompts, outputs, arrivals)
    three = simulate(model, pack(Cluster(1, 4), Parallel(1, 1), 3, Parallel(1, 1), 1), Cluster(1, 4),
                     prompts, outputs, arrivals)
    assert three.attainment(slo) > one.attainment(slo)
    summary = three.summary(slo)
    assert set(summary["ttft"]) == {"mean", "p50", "p90", "p99"}
    assert summary["ttft"]["p50"] <= summary["ttft"]["p90"] <= summary["ttft"]["p99"]


def _constant_model(prefill: float, step: float) -> LatencyModel:
    coeffs = TPCoefficients(PrefillCoeffs(prefill, 0.0, 0.0), DecodeCoeffs(step, 0.0, 0.0), DecodeCoeffs(step, 0.0, 0.0))
    return LatencyModel(PRESETS["opt-13b"], {1: coeffs}, source="test", kv_tokens={(1, 1): 100000})


def test_serving_overheads_fall_where_the_served_path_pays_them():
    model, cluster = _constant_model(0.1, 0.05), Cluster(1, 2)
    placement = pack(cluster, Parallel(1, 1), 1, Parallel(1, 1), 1)
    x = transfer_seconds(100, model.shape.kv_bytes_per_token(), *placement.instances, cluster)
    hop = ServingOverheads(to_prefill=0.003, first_token=0.004, to_decode=0.005, reserve=0.001, admit=0.002,
                           token=0.006)
    lone = simulate(model, placement, cluster, np.array([100]), np.array([3]), np.zeros(1), serving=hop)
    assert lone.ttft == pytest.approx([0.003 + 0.1 + 0.004])
    # decode joins (idle engine) after dispatch, reservation, pull and admission; two steps; the relay
    assert lone.tpot == pytest.approx([(0.005 + 0.001 + x + 0.002 + 2 * 0.05 + 0.006 - 0.004) / 2])


def _two_on_one_decode(serving: ServingOverheads):
    """A (10 tokens) and B (2 tokens, 0.12 s later) on 1 prefill (100 ms) + 1 decode (50 ms steps) instance: the
    KV transfer time and the results without and with `serving`."""
    model, cluster = _constant_model(0.1, 0.05), Cluster(1, 2)
    placement = pack(cluster, Parallel(1, 1), 1, Parallel(1, 1), 1)
    x = transfer_seconds(100, model.shape.kv_bytes_per_token(), *placement.instances, cluster)
    prompts, outputs, arrivals = np.array([100, 100]), np.array([10, 2]), np.array([0.0, 0.12])
    return (x, simulate(model, placement, cluster, prompts, outputs, arrivals),
            simulate(model, placement, cluster, prompts, outputs, arrivals, serving=serving))


def test_a_pulled_request_on_a_busy_decode_is_reserved_at_once_and_joins_at_the_next_boundary():
    x, ideal, served = _two_on_one_decode(ServingOverheads(reserve=0.001))
    # A decodes from 0.1 + x (ideal) or 0.101 + x (served), in steps of 50 ms. B's first token at 0.22: it is pulled
    # at once (served: reserved 1 ms later, without waiting for A's step to end) and joins at A's next boundary.
    assert ideal.tpot[1] == pytest.approx(0.25 + x + 0.05 - 0.22)
    assert served.tpot[1] == pytest.approx(0.251 + x + 0.05 - 0.22)
    assert served.ttft == pytest.approx(ideal.ttft)


def test_a_hand_off_lengthens_the_step_its_request_joins_for_everyone_in_it():
    _, ideal, joined = _two_on_one_decode(ServingOverheads(join=0.004))
    # A's first step (it joins) and B's join step at 0.25 + x each take 4 ms more; A's other 7 steps do not.
    assert joined.tpot[1] == pytest.approx(ideal.tpot[1] + 0.008)
    assert joined.tpot[0] == pytest.approx(ideal.tpot[0] + 0.008 / 9)


PREFIX = TPCoefficients(PrefillCoeffs(0.01, 5e-5, 2e-8), NO_DECODE, NO_DECODE)  # c0, per token, per t2 unit


def test_a_prefix_hit_charges_only_the_suffix_and_its_attention_over_the_prefix():
    whole = simulate_prefill(PREFIX, 1, 4096, np.array([1024]), np.zeros(1))
    hit = simulate_prefill(PREFIX, 1, 4096, np.array([1024]), np.zeros(1), cached=np.array([768]))
    assert whole == pytest.approx([0.01 + 5e-5 * 1024 + 2e-8 * 1024 ** 2])
    assert hit == pytest.approx([0.01 + 5e-5 * 256 + 2e-8 * (1024 ** 2 - 768 ** 2)])  # 256 new · (256 + 2 · 768)


def test_no_hits_simulate_exactly_as_without_a_hit_distribution():
    model, rng = _model(), np.random.default_rng(3)
    prompts, outputs = rng.integers(16, 1800, 500), rng.integers(1, 200, 500)
    arrivals = unit_arrivals(500, rng) / 8
    placement, cluster = pack(Cluster(1, 4), Parallel(1, 1), 2, Parallel(1, 1), 2), Cluster(1, 4)
    plain = simulate(model, placement, cluster, prompts, outputs, arrivals)
    zero = simulate(model, placement, cluster, prompts, outputs, arrivals, cached=np.zeros(500, np.int64),
                    decode_holds_prefix=True)
    assert np.array_equal(plain.ttft, zero.ttft) and np.array_equal(plain.tpot, zero.tpot)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mdl_closed_form_with_the_service_time_of_the_uncached_length(rho):
    cached = np.full(N, 384)  # of L = 512: the prefill computes 128 tokens after 384 cached
    d = PREFIX.prefill_time(L - 384, (L - 384) * (L + 384))
    lam = rho / d
    arrivals = unit_arrivals(N, np.random.default_rng(7)) / lam
    ttft = simulate_prefill(PREFIX, 1, 1, np.full(N, L), arrivals, cached)  # Lm = 1: no batching
    assert ttft.mean() == pytest.approx(d + lam * d * d / (2 * (1 - lam * d)), rel=0.03)
    assert d < PREFIX.prefill_time(L, L * L) / 2


def test_lm_counts_the_uncached_tokens_of_a_batch():
    arrivals = np.array([0.0, 0.001, 0.002])
    alone = simulate_prefill(PREFIX, 1, 300, np.full(3, 200), arrivals)
    batched = simulate_prefill(PREFIX, 1, 300, np.full(3, 200), arrivals, cached=np.full(3, 100))
    assert alone[1] + arrivals[1] != pytest.approx(alone[2] + arrivals[2])  # 400 tokens > Lm: one at a time
    assert batched[1] + arrivals[1] == pytest.approx(batched[2] + arrivals[2])  # 200 uncached ≤ Lm: together


def test_a_decode_holding_the_prefix_pulls_only_the_uncached_blocks():
    model, rng = _model(), np.random.default_rng(0)
    prompts, outputs, cached = np.full(200, 1000), np.full(200, 20), np.full(200, 900)
    arrivals = unit_arrivals(200, rng) / 5
    cluster = Cluster(2, 1, inter_node_gbps=10)
    far = pack(cluster, Parallel(1, 1), 1, Parallel(1, 1), 1)
    full = simulate(model, far, cluster, prompts, outputs, arrivals, cached=cached)
    delta = simulate(model, far, cluster, prompts, outputs, arrivals, cached=cached, decode_holds_prefix=True)
    saved = transfer_seconds(900, model.shape.kv_bytes_per_token(), *far.instances, cluster)
    assert delta.ttft == pytest.approx(full.ttft)
    assert delta.tpot.mean() < full.tpot.mean() - saved / 19 * 0.9
