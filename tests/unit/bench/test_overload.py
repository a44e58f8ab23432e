"""Past the knee: goodput, the share refused and the admitted requests' attainment of a run."""

import argparse

import pytest

from services.bench.cli import _multiples
from services.bench.loadgen import RequestResult
from services.bench.overload import overload_point, refused, slo_metadata
from services.bench.slo import ScaledSLO
from services.common.slo import SLO

SLO_ = ScaledSLO(SLO(0.5, 0.05))


def _served(ttft: float, tpot: float) -> RequestResult:
    return RequestResult("r", 10, 5, sent=100.0, first=100.0 + ttft, last=100.0 + ttft + 4 * tpot)


def test_refused_requests_miss_and_the_admitted_ones_have_their_own_attainment():
    results = [_served(0.1, 0.01)] * 5 + [_served(0.9, 0.01)] + [
        RequestResult("x", 10, error="RESOURCE_EXHAUSTED: slo: predicted TTFT 900.0 ms > SLO 500 ms")] * 3 + [
        RequestResult("q", 10, error="RESOURCE_EXHAUSTED: router queue full (9 waiting)")]
    point = overload_point(2.0, 4.0, True, results, SLO_, devices=2)
    assert (point.requests, point.refused, point.share_refused) == (10, 3, 0.3)
    assert point.attainment == 0.5 and point.admitted_attainment == pytest.approx(5 / 7)  # the full queue: admitted
    assert point.goodput == 2.0 and point.goodput_per_device == 1.0
    assert refused(results[6]) and not refused(results[-1])
    none_admitted = overload_point(2.0, 4.0, True, results[6:9], SLO_, devices=2)
    assert none_admitted.admitted_attainment is None and none_admitted.goodput == 0.0


def test_the_slo_travels_as_milliseconds_and_multiples_are_checked():
    assert slo_metadata(ScaledSLO(SLO(0.5, 0.05), 2.0)) == (("x-slo-ttft-ms", "1000.000"), ("x-slo-tpot-ms", "100.000"))
    assert _multiples("1.5,2") == (1.5, 2.0)
    for bad in ("", "fast", "0,2", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _multiples(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="--at-knee"):
        _multiples("x", "--at-knee")
