"""The router's live error metrics as the bench reads them: a histogram's quantiles over one run, the gauges."""

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from services.bench.live import parse, quantile, run_errors


def _exposition(ttft_errors: list[float], attainment: float) -> str:
    """What a router's /metrics shows after these errors (the router's own metric names and buckets)."""
    from services.router.slo_metrics import ERROR_BUCKETS

    registry = CollectorRegistry()
    ttft = Histogram("distserve_slo_ttft_error_seconds", "", buckets=ERROR_BUCKETS, registry=registry)
    Histogram("distserve_slo_tpot_error_seconds", "", buckets=ERROR_BUCKETS, registry=registry)
    gauge = Gauge("distserve_slo_attainment", "", ["phase", "source"], registry=registry)
    for e in ttft_errors:
        ttft.observe(e)
    gauge.labels("both", "predicted").set(attainment)
    return generate_latest(registry).decode()


def test_a_run_counts_only_its_own_errors_and_leaves_the_gauges():
    before = parse(_exposition([1.0] * 10, 0.5))
    after = parse(_exposition([1.0] * 10 + [-0.03] * 5 + [0.003] * 5, 0.95))
    errors = run_errors(before, after)
    ttft = errors["ttft_error_s"]
    assert ttft["count"] == 10  # the ten of the run, not the ten before it
    assert -0.05 <= ttft["p10"] <= -0.02 and 0.002 <= ttft["p90"] <= 0.005
    assert errors["tpot_error_s"] == {"count": 0, "p10": None, "p50": None, "p90": None}
    assert errors["attainment"] == {"both/predicted": 0.95}


def test_quantiles_interpolate_within_the_bucket():
    cumulative = [(-1.0, 0.0), (0.0, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert quantile(cumulative, 0.5) == 0.0
    assert quantile(cumulative, 0.75) == pytest.approx(0.5)
    assert quantile([(0.0, 0.0), (float("inf"), 4.0)], 0.9) == 0.0  # beyond the last bound: that bound
    assert quantile([(0.0, 0.0)], 0.5) is None
