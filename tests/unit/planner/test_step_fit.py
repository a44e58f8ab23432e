"""The latency model fitted to served steps (the bench's calibration and the planner's online fit share it)."""

from collections import Counter

import numpy as np
import pytest

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.served_fit import fit_steps, residuals
from services.engine.step_log import StepRecord

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


def test_without_a_profile_every_term_is_fitted_and_the_residuals_of_an_exact_fit_are_nil():
    from services.common.step_model.served_fit import fit_decode_steps, fit_prefill_steps

    true_p, true_d = PrefillCoeffs(0.004, 5e-4, 2e-7), DecodeCoeffs(0.003, 4e-6, 6e-4)
    batches = [[40], [120], [300], [480], [200, 150], [60, 60, 60], [700], [30, 900]]
    pre = [_prefill(b, true_p.c0 + true_p.per_token * sum(b) + true_p.per_sq * sum(p * p for p in b)) for b in batches]
    dec = [_decode([c] * n, true_d.c0 + true_d.per_ctx * c * n + true_d.per_req * n)
           for c in (50, 200, 400) for n in (1, 2, 3, 5)]
    p = fit_prefill_steps(pre + dec, None)
    d, join_s = fit_decode_steps(pre + dec, None)
    for got, want in ((p, true_p), (d, true_d)):
        for name in want.__slots__:
            assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-6, abs=1e-12)
    assert join_s == 0.0
    res = residuals(pre + dec, p, d)
    assert (res["prefill"].steps, res["decode"].steps) == (8, 12)
    assert res["prefill"].rmse_s < 1e-9 and res["decode"].max_abs_s < 1e-9
    # noise of a known size shows as that size
    noisy = [StepRecord(s.kind, s.seqs, s.tokens, s.sum_sq, s.context, s.start, s.seconds * (1.1 if i % 2 else 0.9))
             for i, s in enumerate(dec)]
    assert residuals(noisy, None, d)["decode"].mean_abs_rel == pytest.approx((0.1 / 1.1 + 0.1 / 0.9) / 2)  # of served
    assert np.isfinite(residuals(noisy, None, d)["decode"].rmse_s) and "prefill" not in residuals(noisy, None, d)
