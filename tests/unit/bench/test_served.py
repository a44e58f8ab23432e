"""The latency model fitted to served steps, and the request path's overheads measured on lone requests and under load."""

from collections import Counter

import pytest

from services.bench.loadgen import RequestResult
from services.bench.served import fit_steps, joins_of, loaded_overheads, path_overheads
from services.common.stamps import Lifetime
from services.engine.step_log import StepRecord
from services.planner.latency import DecodeCoeffs, PrefillCoeffs, TPCoefficients
from services.planner.serving import ServingOverheads

PROFILED = TPCoefficients(PrefillCoeffs(3e-3, 8e-4, 1e-7), DecodeCoeffs(0.011, 3e-6, 8e-4), DecodeCoeffs(0.011, 3e-6, 8e-4))


def _prefill(prompts: list[int], seconds: float) -> StepRecord:
    return StepRecord("prefill", len(prompts), sum(prompts), sum(p * p for p in prompts), sum(prompts), 0.0, seconds)


def _decode(contexts: list[int], seconds: float) -> StepRecord:
    return StepRecord("decode", len(contexts), len(contexts), len(contexts), sum(contexts), 0.0, seconds)


def test_fit_recovers_the_coefficients_of_served_steps():
    # serving adds to the fixed, per-token and per-request terms; the attention terms are the profile's
    served = TPCoefficients(PrefillCoeffs(0.015, 9e-4, PROFILED.prefill.per_sq), DecodeCoeffs(0.007, 3e-6, 3.5e-3),
                            DecodeCoeffs(0.007, 3e-6, 3.5e-3))
    batches = [[40], [120], [300], [480], [200, 150], [60, 60, 60]]
    prefill = [_prefill(b, served.prefill_time(sum(b), sum(p * p for p in b))) for b in batches]
    decode = [_decode([c] * n, served.decode_time(c * n, n)) for c in (50, 200, 400) for n in (1, 2, 3, 5)]
    decode.append(StepRecord("mixed", 2, 9, 65, 70, 0.0, 1.0))  # a step that mixes phases fits neither
    fit = fit_steps(prefill + decode, PROFILED)
    assert (fit.prefill_steps, fit.decode_steps) == (6, 12)
    for got, want in ((fit.coeffs.prefill, served.prefill), (fit.coeffs.decode_small, served.decode_small)):
        for name in want.__slots__:
            assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-6, abs=1e-12)


def test_attention_terms_stay_as_profiled_and_too_few_shapes_keep_the_profile():
    # served steps of one context cannot tell a per-context term from a per-request one: the profile's stays
    decode = [_decode([100] * n, 0.006 + 100 * n * PROFILED.decode_small.per_ctx + 4e-3 * n) for n in (1, 2, 4)]
    fit = fit_steps([_prefill([100], 0.1)] * 3 + decode, PROFILED)
    d = fit.coeffs.decode_small
    assert (d.c0, d.per_ctx, d.per_req) == pytest.approx((0.006, PROFILED.decode_small.per_ctx, 4e-3))
    assert fit.coeffs.prefill == PROFILED.prefill and fit.prefill_steps == 0
    assert fit_steps([_decode([100], 0.02)], PROFILED).coeffs.decode_small == PROFILED.decode_small
    # short prompts only (a code workload) must not teach the fit a quadratic term for long ones
    short = [_prefill([n] * 4, 0.01 + 1e-3 * 4 * n + 5e-6 * 4 * n * n) for n in (10, 20, 30, 40)]
    assert fit_steps(short, PROFILED).coeffs.prefill.per_sq == PROFILED.prefill.per_sq


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


SERVED_DECODE = DecodeCoeffs(0.005, PROFILED.decode_small.per_ctx, 0.001)


def _steps_with_joins(joined: dict[int, int]) -> tuple[list[StepRecord], Counter[float]]:
    """40 decode steps of batches 2–5 served by SERVED_DECODE; each request joining step i adds +2 ms to step
    i − 1, +1 ms to step i and +0.5 ms to step i + 1."""
    extra = [0.0] * 40
    for i, n in joined.items():
        for k, ms in ((-1, 2.0), (0, 1.0), (1, 0.5)):
            extra[i + k] += n * ms / 1000
    steps, joins, t = [], Counter(), 100.0
    for i in range(40):
        seqs = 2 + i % 4
        seconds = SERVED_DECODE.c0 + SERVED_DECODE.per_ctx * 100 * seqs + SERVED_DECODE.per_req * seqs + extra[i]
        steps.append(StepRecord("decode", seqs, seqs, seqs, 100 * seqs, t, seconds))
        joins[t] += joined.get(i, 0)
        t += seconds
    return steps, +joins


@pytest.mark.parametrize("joined", [{10: 1, 30: 1}, {5: 2, 12: 1, 13: 1, 25: 3, 33: 1}],
                         ids=["apart", "sharing-and-neighbouring-steps"])
def test_a_hand_off_is_fitted_per_request_beside_the_decode_terms(joined: dict[int, int]):
    steps, joins = _steps_with_joins(joined)
    fit = fit_steps(steps, PROFILED, joins)
    assert fit.join_s == pytest.approx(0.0035, abs=1e-9)
    for name in SERVED_DECODE.__slots__:
        assert getattr(fit.coeffs.decode_small, name) == pytest.approx(getattr(SERVED_DECODE, name), rel=1e-6, abs=1e-12)
    apart = fit_steps(steps, PROFILED)  # without the joins the step model absorbs their average cost
    assert apart.join_s == 0.0 and apart.coeffs.decode_small.c0 > SERVED_DECODE.c0


def test_the_hand_offs_of_a_load_are_its_disaggregated_requests_by_decode_step():
    handed = Lifetime(prefill_end=1.0, xfer_start=1.01, xfer_end=1.02, decode_start=1.03)
    colocated = Lifetime(prefill_end=1.0, decode_start=1.0)
    results = [RequestResult(r, 10, 4, sent=0.5, first=1.01, lifetime=life)
               for r, life in (("a", handed), ("b", handed), ("c", colocated))]
    results.append(RequestResult("d", 10, error="UNAVAILABLE: gone", lifetime=handed))
    assert joins_of(results) == Counter({1.03: 2})
