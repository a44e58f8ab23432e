"""Step costs that grow with the offered rate: the line through each load's served ÷ modelled step time, and the
predictor scaled by it."""

import pytest

from services.bench.load_scaling import LoadScaling, Window, fit_load
from services.bench.slo import SLO
from services.bench.workload import BenchWorkload
from services.engine.step_log import StepRecord
from services.planner.latency import DecodeCoeffs, PrefillCoeffs, TPCoefficients

COEFFS = TPCoefficients(PrefillCoeffs(0.01, 1e-3, 0.0), DecodeCoeffs(0.005, 1e-6, 1e-3), DecodeCoeffs(0.005, 1e-6, 1e-3))


def _steps(window: Window, factor: float, n: int = 20) -> tuple[list[StepRecord], list[StepRecord]]:
    at = [window.began + (window.end - window.began) * i / n for i in range(n)]
    prefill = [StepRecord("prefill", 1, 100 + i, (100 + i) ** 2, 100 + i, t, factor * COEFFS.prefill_time(100 + i, 0))
               for i, t in enumerate(at)]
    decode = [StepRecord("decode", 1 + i % 4, 1 + i % 4, 1 + i % 4, 300, t, factor * COEFFS.decode_time(300, 1 + i % 4))
              for i, t in enumerate(at)]
    return prefill, decode


def test_the_line_through_each_windows_ratio_extrapolates_to_higher_rates():
    windows = [Window(1.0, 0.0, 10.0), Window(2.0, 20.0, 30.0), Window(1.5, 40.0, 50.0)]
    prefill, decode = [], []
    for w, factor in zip(windows, (1.0, 1.2, 1.1)):
        p, d = _steps(w, factor)
        prefill += p
        decode += d
    load = fit_load(windows, prefill, decode, COEFFS)
    assert load.factors(3.0) == pytest.approx((1.4, 1.4))
    assert load.prefill == pytest.approx((0.8, 0.2))


def test_one_rate_or_a_falling_trend_gives_no_growth():
    one = [Window(1.0, 0.0, 10.0)]
    assert fit_load(one, *_steps(one[0], 1.1), COEFFS).factors(5.0) == pytest.approx((1.1, 1.1))
    windows = [Window(1.0, 0.0, 10.0), Window(2.0, 20.0, 30.0)]
    p1, d1 = _steps(windows[0], 1.2)
    p2, d2 = _steps(windows[1], 1.0)
    load = fit_load(windows, p1 + p2, d1 + d2, COEFFS)
    assert load.decode == pytest.approx((1.1, 0.0))  # flat at the steps' mean ratio


def test_a_predictor_scaled_for_load_predicts_lower_attainment(predictor):
    sample = BenchWorkload("chatbot").sample(60, vocab=300)
    slo = SLO(ttft=0.7, tpot=0.04)
    coeffs = predictor.model.at(1)
    plain = predictor.fitted(coeffs, predictor.serving)
    loaded = predictor.fitted(coeffs, predictor.serving, LoadScaling((1.0, 0.5), (1.0, 0.5)))
    rate = plain.goodput(lambda r: sample, slo)
    assert loaded.attainment(sample, rate, slo) < plain.attainment(sample, rate, slo)
    assert loaded.attainment(sample, 0.01, slo) == pytest.approx(plain.attainment(sample, 0.01, slo), abs=0.02)
