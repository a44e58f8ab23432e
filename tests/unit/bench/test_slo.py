"""Attainment counts requests meeting both objectives; SLO scales multiply the lone-request latencies."""

import numpy as np
import pytest

from services.bench.slo import ScaledSLO, attainment, lone_latencies, scaled_slo, tightest_scale
from services.common.slo import SLO
from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients

INF = float("inf")


def test_attainment_needs_both_objectives_and_counts_failures_as_misses():
    ttft = np.array([0.1, 0.3, 0.1, INF])
    tpot = np.array([0.01, 0.01, 0.05, INF])
    ok = np.array([True, True, True, False])
    assert attainment(ttft, tpot, ok, ScaledSLO(SLO(0.2, 0.02))) == 0.25
    assert attainment(ttft, tpot, ok, ScaledSLO(SLO(0.2, 0.02), 2.0)) == 0.5
    assert attainment(ttft, tpot, ok, ScaledSLO(SLO(0.2, 0.02), 3.0)) == 0.75


def test_limits_on_the_boundary_are_met():
    assert attainment(np.array([0.2]), np.array([0.02]), np.array([True]), ScaledSLO(SLO(0.2, 0.02))) == 1.0


def test_tightest_scale_is_the_smallest_scale_meeting_the_target():
    rng = np.random.default_rng(0)
    ttft, tpot = rng.uniform(0.05, 0.5, 50), rng.uniform(0.005, 0.05, 50)
    ok = np.ones(50, bool)
    slo = ScaledSLO(SLO(0.1, 0.01, 0.9))
    scale = tightest_scale(ttft, tpot, ok, slo)
    assert attainment(ttft, tpot, ok, ScaledSLO(SLO(0.1, 0.01, 0.9), scale)) >= 0.9
    assert attainment(ttft, tpot, ok, ScaledSLO(SLO(0.1, 0.01, 0.9), scale * 0.999)) < 0.9


def test_tightest_scale_is_infinite_when_too_many_requests_failed():
    ok = np.array([True, False])
    assert tightest_scale(np.array([0.1, INF]), np.array([0.01, INF]), ok, ScaledSLO(SLO(0.1, 0.01, 0.9))) == INF


def test_scales_multiply_the_lone_latencies_of_the_latency_model():
    coeffs = TPCoefficients(PrefillCoeffs(0.01, 1e-3, 1e-6), DecodeCoeffs(0.02, 1e-5, 1e-3), DecodeCoeffs(0.02, 1e-5, 1e-3))
    base_ttft, base_tpot = lone_latencies(coeffs, 100.0, 20.0)
    assert base_ttft == pytest.approx(0.01 + 0.1 + 0.01)
    assert base_tpot == pytest.approx(0.02 + 110e-5 + 1e-3)
    slo = scaled_slo(base_ttft, base_tpot, ttft_scale=5.0, tpot_scale=2.0, scale=1.5, target=0.9)
    assert slo.limits.ttft == pytest.approx(1.5 * 5.0 * base_ttft)
    assert slo.limits.tpot == pytest.approx(1.5 * 2.0 * base_tpot)
