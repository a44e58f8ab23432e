"""The planner's prediction for the benchmarked placement, and its rescaling to served lone requests."""

from dataclasses import replace

import pytest

from services.bench.slo import ScaledSLO
from services.bench.workload import BenchWorkload
from services.common.slo import SLO


@pytest.mark.parametrize("mode", ["disagg", "colocated", "chunked"])
def test_attainment_falls_as_the_rate_rises(predictor, mode):
    predictor = replace(predictor, mode=mode)
    sample = BenchWorkload("chatbot").sample(60, vocab=300)
    slo = ScaledSLO(SLO(0.7, 0.04))
    low, high = predictor.attainment(sample, 0.2, slo), predictor.attainment(sample, 20.0, slo)
    assert low > 0.9 and high < 0.5
    goodput = predictor.goodput(lambda rate: sample, slo)
    assert predictor.attainment(sample, goodput, slo) >= 0.9


def test_calibration_recovers_the_served_to_profiled_ratios(predictor):
    c = predictor.model.at(1)
    lone = [(p, 16, 2.0 * c.prefill_time(p, p * p), 1.5 * c.decode_time(p + 8, 1)) for p in (50, 150, 300)]
    slower, factors = predictor.calibrated(lone)
    assert factors == pytest.approx({"prefill_factor": 2.0, "decode_factor": 1.5})
    assert slower.model.at(1).prefill_time(100, 100**2) == pytest.approx(2.0 * c.prefill_time(100, 100**2))
    assert slower.model.at(1).decode_time(500, 3) == pytest.approx(1.5 * c.decode_time(500, 3))
    assert predictor.model.at(1) is c


def test_colocated_decodes_suffer_the_prefills_that_disaggregation_keeps_apart(predictor):
    # long prompts: colocated decodes wait for every prompt's prefill step, disaggregated ones do not
    sample = BenchWorkload("summarization").sample(200, vocab=300)
    slo = ScaledSLO(SLO(10.0, 0.04))
    disagg = predictor.attainment(sample, 1.0, slo)
    colocated = replace(predictor, mode="colocated").attainment(sample, 1.0, slo)
    assert disagg > colocated + 0.1
