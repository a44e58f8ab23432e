"""Predicted against measured: the error histograms, the attainment over the last window, the records."""

from prometheus_client import REGISTRY

from services.common.sampling import SamplingParams
from services.common.slo import SLO
from services.router import slo_metrics
from services.router.admission import Prediction
from services.router.request import RouterRequest


def test_attainment_per_phase_as_predicted_and_as_measured():
    window = slo_metrics.AttainmentWindow(size=4)
    slo = SLO(ttft=0.2, tpot=0.05)
    # predicted: all meet; measured: the first two miss TTFT, one misses TPOT
    for ttft, tpot in ((0.3, 0.01), (0.25, 0.01), (0.1, 0.06), (0.1, 0.01), (0.1, 0.01)):
        window.add(slo_metrics.outcome(Prediction(0.15, 0.02), slo, ttft, tpot))
    assert window.share("ttft", "predicted") == 1.0
    assert window.share("ttft", "measured") == 0.75  # the window keeps the last four
    assert window.share("tpot", "measured") == 0.75 and window.share("both", "measured") == 0.5
    assert REGISTRY.get_sample_value("distserve_slo_attainment", {"phase": "both", "source": "measured"}) == 0.5
    no_tpot = slo_metrics.outcome(Prediction(0.15, None), SLO(0.2, None), 0.1, None)
    assert no_tpot.predicted == {"ttft": True, "tpot": None, "both": True}


def _bucket(name: str, le: str) -> float:
    return REGISTRY.get_sample_value(f"distserve_slo_{name}_error_seconds_bucket", {"le": le}) or 0.0


def test_errors_are_measured_minus_predicted():
    # negative buckets: Prometheus exposes no _sum for these histograms, so the buckets tell the sign and size
    edges = [("ttft", "0.02"), ("ttft", "0.05"), ("tpot", "-0.01"), ("tpot", "-0.005")]
    before = [_bucket(*e) for e in edges]
    slo_metrics.observe(Prediction(0.1, 0.02), 0.13, 0.015)  # TTFT +30 ms, TPOT −5 ms
    assert [_bucket(*e) - b for e, b in zip(edges, before)] == [0, 1, 0, 1]


def test_the_request_record_carries_the_prediction_for_later_comparison():
    req = RouterRequest("r1", [1, 2, 3], SamplingParams(), prediction=Prediction(0.25, None, "p0", "d0", 1200.0))
    record = req.record(1, "disagg")
    assert (record["predicted_ttft"], record["predicted_prefill_queue"]) == (0.25, 1200.0)
    assert "predicted_tpot" not in record  # nothing predicted: no field (a stream's values are never None)
    assert not any(k.startswith("predicted_") for k in RouterRequest("r2", [1], SamplingParams()).record(1, "disagg"))
