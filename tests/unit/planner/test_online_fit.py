"""The planner's online fit: a rolling window per instance kind and device, refitted to known coefficients."""

import pytest

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.engine.step_log import StepRecord
from services.planner.online_fit import OnlineFit

SEED = TPCoefficients(PrefillCoeffs(1e-3, 1e-4, 3e-7), DecodeCoeffs(2e-3, 5e-6, 1e-4), DecodeCoeffs(2e-3, 5e-6, 1e-4))
SERVED_P = PrefillCoeffs(0.02, 6e-4, SEED.prefill.per_sq)
SERVED_D = DecodeCoeffs(0.008, SEED.decode_small.per_ctx, 2e-3)


def _prefill_steps(start: float) -> list[StepRecord]:
    lens = [30, 90, 150, 260, 410, 77]
    return [StepRecord("prefill", 1, n, n * n, n, start + i, SERVED_P.c0 + SERVED_P.per_token * n + SERVED_P.per_sq * n * n)
            for i, n in enumerate(lens)]


def _decode_steps(start: float) -> list[StepRecord]:
    shapes = [(b, 100 * b + 7 * i) for i, b in enumerate((1, 2, 3, 4, 2, 5, 1, 3))]
    return [StepRecord("decode", b, b, b, ctx, start + 0.1 * i, SERVED_D.c0 + SERVED_D.per_ctx * ctx + SERVED_D.per_req * b)
            for i, (b, ctx) in enumerate(shapes)]


def test_each_kind_and_device_is_fitted_to_its_own_window():
    fit = OnlineFit(registry=None, seed=SEED, seed_source="profile:test", window_s=60.0)
    fit.ingest("prefill", "cpu:0", "p0", _prefill_steps(1000.0))
    fit.ingest("decode", "cpu:1", "d0", _decode_steps(1000.0))
    model = fit.refit(now=1010.0)
    assert model["seed"] == "profile:test" and set(model["kinds"]) == {"prefill@cpu:0", "decode@cpu:1"}
    pre, dec = model["kinds"]["prefill@cpu:0"], model["kinds"]["decode@cpu:1"]
    assert pre["decode"] is None and dec["prefill"] is None
    assert pre["prefill"] == pytest.approx({"c0": SERVED_P.c0, "per_token": SERVED_P.per_token, "per_sq": SERVED_P.per_sq})
    assert dec["decode"] == pytest.approx({"c0": SERVED_D.c0, "per_ctx": SERVED_D.per_ctx, "per_req": SERVED_D.per_req})
    assert pre["window"]["prefill_steps"] == 6 and dec["window"]["decode_steps"] == 8
    assert pre["residuals"]["prefill"]["rmse_s"] < 1e-9 and dec["residuals"]["decode"]["steps"] == 8
    assert pre["instances"] == ["p0"]


def test_the_window_drops_old_steps_and_steps_already_read():
    fit = OnlineFit(registry=None, seed=SEED, window_s=60.0)
    fit.ingest("prefill", "cpu:0", "p0", _prefill_steps(1000.0))
    fit.ingest("prefill", "cpu:0", "p0", _prefill_steps(1000.0))  # read again (steps_since is inclusive)
    assert fit.refit(now=1010.0)["kinds"]["prefill@cpu:0"]["window"]["steps"] == 6
    fit.ingest("prefill", "cpu:0", "p0", _prefill_steps(1100.0))
    window = fit.refit(now=1110.0)["kinds"]["prefill@cpu:0"]["window"]
    assert window["steps"] == 6 and window["from"] == 1100.0  # the first six aged out
    assert fit.refit(now=1300.0)["kinds"] == {}


def test_the_ttft_hops_are_the_median_of_the_records_path_outside_prefill():
    from services.planner.online_fit import ttft_hops

    def record(arrival: float, to_prefill: float, relay: float) -> dict[str, str]:
        return {"arrival": repr(arrival), "prefill_queued": repr(arrival + to_prefill),
                "prefill_end": repr(arrival + to_prefill + 0.5), "first_token": repr(arrival + to_prefill + 0.5 + relay)}

    records = [record(100.0, 0.002, 0.001), record(101.0, 0.004, 0.002), record(102.0, 0.010, 0.010),
               record(50.0, 9.0, 9.0), {"arrival": "103.0", "prefill_queued": "0"}, {"request_id": "x"}]
    assert ttft_hops(records, since=90.0) == pytest.approx(0.006)  # the old one and the incomplete ones left out
    assert ttft_hops(records[3:], since=90.0) is None


def test_the_handoff_is_the_median_of_first_token_to_decode_start():
    from services.planner.online_fit import handoff

    def record(arrival: float, gap: float) -> dict[str, str]:
        return {"arrival": repr(arrival), "first_token": repr(arrival + 0.5), "decode_start": repr(arrival + 0.5 + gap)}

    records = [record(100.0, 0.010), record(101.0, 0.020), record(102.0, 0.050), record(50.0, 9.0),
               {"arrival": "103.0", "first_token": "103.5", "decode_start": "0"}, {"request_id": "x"}]
    assert handoff(records, since=90.0) == pytest.approx(0.020)  # colocated and old records left out
    assert handoff(records[3:], since=90.0) is None
