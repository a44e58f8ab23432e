"""The admission margin: a quantile of the model's recent errors, added to predictions before the decision."""

import pytest

from services.common.slo import SLO
from services.common.step_model.stored import FittedModel
from services.router.admission import Candidate, Margin, decide, predict
from services.router.margin import ErrorWindow

MODEL = FittedModel.from_json({"fitted_at": 5.0, "kinds": {
    "prefill@cpu:0": {"prefill": {"c0": 0.01, "per_token": 1e-4, "per_sq": 0.0}, "decode": None},
    "decode@cpu:1": {"prefill": None, "decode": {"c0": 0.004, "per_ctx": 1e-6, "per_req": 1e-3}},
}})


def test_no_margin_until_enough_errors_or_with_quantile_zero():
    window = ErrorWindow(0.9, 0.9, least=20)
    for _ in range(19):
        window.add(1.0, 0.5, 0.01)
    assert window.margin == Margin()
    window.add(1.0, 0.5, 0.01)
    assert window.margin == Margin(0.5, 0.01)
    ttft_only = ErrorWindow(0.9)  # the default: no TPOT margin
    for _ in range(50):
        ttft_only.add(1.0, 0.5, 0.01)
    assert ttft_only.margin == Margin(0.5, 0.0)


def test_old_errors_drop_out_so_a_margin_that_refuses_everything_does_not_last():
    """Refusing nearly every request brings no new errors: the old ones leave after the horizon and with them
    the margin, and requests are admitted again."""
    window = ErrorWindow(0.9, least=5, horizon_s=60)
    for i in range(10):
        window.add(100.0 + i, 5.0, None)
    assert window.margin.ttft_s == 5.0
    window.expire(150.0)
    assert window.margin.ttft_s == 5.0
    window.expire(166.0)  # six of the ten are older than 60 s: four left, fewer than five
    assert window.margin.ttft_s == 0.0


def test_the_margin_is_the_conformal_quantile_of_the_last_errors():
    window = ErrorWindow(0.9, 0.9, size=100, least=1)
    for i in range(1000):  # only the last 100 count: 0.900 .. 0.999
        window.add(1.0, i / 1000, None)
    # rank ceil(101 * 0.9) = 91 of the 100 kept errors
    assert window.margin.ttft_s == pytest.approx(0.990)
    assert window.margin.tpot_s == 0.0  # no TPOT error seen (single-token requests)
    under = ErrorWindow(0.9, least=1)
    for e in (-0.3, -0.2, -0.1):  # the model over-predicts: a negative margin admits more
        under.add(1.0, e, None)
    assert under.margin.ttft_s == pytest.approx(-0.1)


def test_a_request_the_bare_prediction_admits_is_refused_with_the_margin():
    prediction = predict(MODEL, [Candidate("p0", "prefill@cpu:0", 1000)], [Candidate("d0", "decode@cpu:1", 0)],
                         100, 10, batch_tokens=512)
    slo = SLO(ttft=prediction.ttft_s + 0.1)
    assert decide(prediction, slo, "refuse").admit
    refused = decide(prediction, slo, "refuse", Margin(ttft_s=0.15))
    assert not refused.admit
    assert "recent error" in refused.reason and refused.retry_after_s == 1.0
    assert decide(prediction, slo, "refuse", Margin(ttft_s=0.05)).admit
    best_effort = decide(prediction, slo, "best-effort", Margin(ttft_s=0.15))
    assert best_effort.admit and best_effort.best_effort
