"""Colocated (vLLM-style) and chunked (Sarathi-style) instances in the simulator: one step loop for both phases."""

import numpy as np
import pytest

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.planner.colocated import simulate_colocated
from services.planner.serving import ServingOverheads

DECODE = DecodeCoeffs(0.01, 1e-5, 1e-3)
COEFFS = TPCoefficients(PrefillCoeffs(0.02, 1e-3, 1e-6), DECODE, DECODE)


def _run(policy, prompts, outputs, arrivals, instances=1, capacity=1 << 20, budget=512, serving=None):
    return simulate_colocated(COEFFS, policy, instances, capacity, budget, np.array(prompts), np.array(outputs),
                              np.array(arrivals, dtype=float), serving)


@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_a_lone_request_prefills_then_decodes_one_token_a_step(policy):
    got = _run(policy, [100], [4], [0.0])
    steps = [COEFFS.decode_time(100 + k, 1) for k in (1, 2, 3)]  # context: prompt + tokens so far
    assert got.ttft[0] == pytest.approx(COEFFS.prefill_time(100, 100 * 100))
    assert got.tpot[0] == pytest.approx(sum(steps) / 3)


def test_a_new_prompt_stalls_a_colocated_decode_for_all_of_it_and_a_chunked_one_for_one_chunk():
    # request 0 has two tokens to go when a 2000-token prompt arrives
    prompts, outputs, arrivals = [50, 2000], [3, 2], [0.0, 0.073]
    colocated, chunked = _run("colocated", prompts, outputs, arrivals), _run("chunked", prompts, outputs, arrivals)
    stall = COEFFS.prefill_time(2000, 2000 * 2000)  # the whole prompt in one step, the decode waiting
    assert colocated.tpot[0] > stall / 2
    assert chunked.tpot[0] < colocated.tpot[0] / 3  # its last token rode along with the first 512-token chunk
    assert chunked.ttft[1] > colocated.ttft[1]  # the long prompt's chunks each pay a step's fixed cost


def test_chunks_fill_the_budget_beside_decodes():
    # request 0 decodes; request 1's 1000-token prompt takes 511 tokens beside it, then 489 (request 0 is done)
    got = _run("chunked", [10, 1000], [2, 2], [0.0, 0.0], budget=512)
    first = COEFFS.prefill_time(10 + 502, 10 * 10 + 502 * 502)  # both prompts start in one step: 10 + 502 tokens
    second = COEFFS.mixed_time(498, 498 * (498 + 2 * 502), 11, 1)  # the rest of the chunk beside 0's decode
    assert got.ttft[0] == pytest.approx(first)
    assert got.ttft[1] == pytest.approx(first + second)


def test_single_token_outputs_finish_at_the_first_token():
    got = _run("colocated", [100, 100], [1, 3], [0.0, 0.0])
    assert got.tpot[0] == 0.0
    assert got.ttft[0] == got.ttft[1] == pytest.approx(COEFFS.prefill_time(200, 2 * 100 * 100))


def test_requests_go_to_the_instance_with_the_fewest_booked_tokens():
    # two instances: the first two requests run side by side, so both see a lone prefill
    got = _run("colocated", [300, 300, 300], [50, 50, 50], [0.0, 0.0, 0.0], instances=2)
    lone = COEFFS.prefill_time(300, 300 * 300)
    assert got.ttft[:2] == pytest.approx([lone, lone])
    assert got.ttft[2] > lone  # the third waits behind one of them


def test_a_request_waits_until_its_kv_fits():
    got = _run("colocated", [100, 100], [20, 20], [0.0, 0.0], capacity=200)
    assert got.ttft[1] > got.ttft[0] + got.tpot[0] * 19  # admitted once the first request has finished


def test_serving_overheads_add_to_the_first_token_and_every_token():
    hop = ServingOverheads(to_prefill=0.003, first_token=0.004, token=0.002)
    plain, served = _run("colocated", [100], [4], [0.0]), _run("colocated", [100], [4], [0.0], serving=hop)
    assert served.ttft[0] == pytest.approx(plain.ttft[0] + 0.007)
    assert served.tpot[0] == pytest.approx(plain.tpot[0] + (0.002 - 0.004) / 3)


def test_a_request_beyond_the_kv_capacity_is_refused():
    with pytest.raises(ValueError, match="KV capacity"):
        _run("chunked", [100], [20], [0.0], capacity=64)
