"""The request path's overheads measured on lone requests and under load, and a load's hand-offs."""

from collections import Counter

import pytest

from services.bench.loadgen import RequestResult
from services.bench.served import joins_of, loaded_overheads, path_overheads, prefill_rows
from services.common.stamps import Lifetime
from services.engine.step_log import StepRecord
from services.planner.serving import ServingOverheads


def test_path_overheads_are_the_medians_of_each_hop_of_lone_requests():
    lone, steps = [], []
    for i, base in enumerate((100.0, 200.0, 300.0)):
        life = Lifetime(arrival=base + 0.001, prefill_queued=base + 0.003, prefill_start=base + 0.003,
                        prefill_end=base + 0.2, decode_queued=base + 0.205, xfer_start=base + 0.2052,
                        xfer_end=base + 0.2072, decode_start=base + 0.2076)
        steps += [StepRecord("decode", 1, 1, 1, 10, base + 0.2076 + 0.012 * k, 0.012) for k in range(3)]
        last = base + 0.2076 + 0.036 + 0.002 + 0.001 * i  # the last step's end, then the relay
        lone.append(RequestResult(f"r{i}", 100, 4, sent=base, first=base + 0.204, last=last, lifetime=life))
    got = path_overheads(lone, steps)
    assert got.as_dict() == pytest.approx({"to_prefill": 0.003, "first_token": 0.004, "to_decode": 0.005,
                                          "reserve": 0.0002, "admit": 0.0004, "token": 0.003, "join": 0.0}, abs=1e-9)


def test_colocated_requests_have_no_hand_off_hops():
    lone, steps = [], []
    for i, base in enumerate((100.0, 200.0, 300.0)):
        life = Lifetime(prefill_queued=base + 0.003, prefill_start=base + 0.003, prefill_end=base + 0.2,
                        decode_start=base + 0.2)
        steps.append(StepRecord("prefill", 1, 100, 10_000, 100, base + 0.003, 0.197))
        steps += [StepRecord("decode", 1, 1, 1, 100 + k, base + 0.2 + 0.012 * k, 0.012) for k in range(3)]
        lone.append(RequestResult(f"r{i}", 100, 4, sent=base, first=base + 0.204, last=base + 0.236 + 0.002,
                                  lifetime=life))
    got = path_overheads(lone, steps)
    assert got.as_dict() == pytest.approx({"to_prefill": 0.003, "first_token": 0.004, "to_decode": 0.0,
                                          "reserve": 0.0, "admit": 0.0, "token": 0.002, "join": 0.0}, abs=1e-9)


LONE = ServingOverheads(to_prefill=0.001, first_token=0.002, to_decode=0.003, reserve=0.0001, admit=0.0002, token=0.0003)


def test_under_load_the_relay_is_timed_from_the_step_that_first_carried_the_request():
    results, steps = [], []
    for i, base in enumerate((100.0, 200.0, 300.0)):
        start = base + 0.215 + 0.004 * i  # the decode step under way when the pull ended: a wait the simulator models
        life = Lifetime(prefill_queued=base + 0.002, prefill_start=base + 0.05, prefill_end=base + 0.2,
                        decode_queued=base + 0.206, xfer_start=base + 0.209, xfer_end=base + 0.211, decode_start=start)
        steps += [StepRecord("decode", 3, 3, 3, 300, start - 0.01, 0.01), StepRecord("decode", 4, 4, 4, 400, start, 0.01)]
        results.append(RequestResult(f"r{i}", 100, 8, sent=base, first=base + 0.204, second=start + 0.01 + 0.002,
                                     last=base + 0.4, lifetime=life))
    results.append(RequestResult("failed", 100, error="UNAVAILABLE: gone"))
    got = loaded_overheads(LONE, results, steps)
    assert got.as_dict() == pytest.approx({"to_prefill": 0.002, "first_token": 0.004, "to_decode": 0.006,
                                          "reserve": 0.0001, "admit": 0.0002, "token": 0.002, "join": 0.0}, abs=1e-9)


def test_without_a_hand_off_the_load_changes_only_the_hops_it_has():
    life = Lifetime(prefill_queued=100.003, prefill_start=100.003, prefill_end=100.2, decode_start=100.2)
    colocated = [RequestResult("r", 100, 4, sent=100.0, first=100.21, second=100.23, last=100.25, lifetime=life)]
    got = loaded_overheads(LONE, colocated, [StepRecord("decode", 1, 1, 1, 101, 100.2, 0.012)])
    assert got.as_dict() == pytest.approx({"to_prefill": 0.003, "first_token": 0.01, "to_decode": 0.003,
                                          "reserve": 0.0001, "admit": 0.0002, "token": 0.0003, "join": 0.0}, abs=1e-9)
    assert loaded_overheads(LONE, [], []) == LONE


def test_the_hand_offs_of_a_load_are_its_disaggregated_requests_by_decode_step():
    handed = Lifetime(prefill_end=1.0, xfer_start=1.01, xfer_end=1.02, decode_start=1.03)
    colocated = Lifetime(prefill_end=1.0, decode_start=1.0)
    results = [RequestResult(r, 10, 4, sent=0.5, first=1.01, lifetime=life)
               for r, life in (("a", handed), ("b", handed), ("c", colocated))]
    results.append(RequestResult("d", 10, error="UNAVAILABLE: gone", lifetime=handed))
    assert joins_of(results) == Counter({1.03: 2})


def test_results_keep_the_prefill_steps_only_with_their_shape_start_and_cost():
    steps = [StepRecord("prefill", 2, 300, 45000, 300, 1700000000.123456, 0.5123456),
             StepRecord("decode", 3, 3, 3, 900, 1700000000.7, 0.02),
             StepRecord("mixed", 2, 120, 10001, 400, 1700000000.8, 0.2)]
    assert prefill_rows(steps) == [(2, 300, 45000, 1700000000.1235, 0.51235)]
