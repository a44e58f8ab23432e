"""`GET /v1/model`: the planner service's online fit over real HTTP (TestClient) and a real Redis."""

import json

import pytest
import redis
from fastapi.testclient import TestClient

from services.common.registry import MODEL_KEY
from services.engine.step_log import StepRecord
from services.planner.api import create_app
from services.planner.config import PlannerSettings


@pytest.fixture
def db_url(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/8"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


def test_model_is_fitted_to_the_ingested_steps_and_published(db_url):
    app = create_app(PlannerSettings(workers=1, redis_url=db_url, fit_interval=0))
    with TestClient(app) as api:
        assert api.get("/v1/model").status_code == 404  # nothing fitted yet
        fit = app.state.online_fit
        steps = [StepRecord("prefill", 1, n, n * n, n, 1e9 + i, 0.01 + 1e-4 * n + 1e-7 * n * n)
                 for i, n in enumerate((20, 60, 140, 300, 45))]
        fit.ingest("prefill", "cpu:0", "p-0", steps)
        fit.refit(now=1e9 + 10)
        api.portal.call(fit.publish)
        model = api.get("/v1/model").json()
    kind = model["kinds"]["prefill@cpu:0"]
    assert kind["prefill"] == pytest.approx({"c0": 0.01, "per_token": 1e-4, "per_sq": 1e-7})
    assert kind["window"]["steps"] == 5 and kind["residuals"]["prefill"]["rmse_s"] < 1e-9
    assert model["window_s"] == 300.0 and model["seed"] is None and model["ttft_hops_s"] is None  # no records
    assert json.loads(redis.Redis.from_url(db_url).get(MODEL_KEY)) == model


def test_an_unreachable_instance_is_skipped_and_the_loop_publishes(db_url):
    from services.common.net import free_port
    from services.common.registry import InstanceInfo

    app = create_app(PlannerSettings(workers=1, redis_url=db_url, fit_interval=0))
    with TestClient(app) as api:
        fit = app.state.online_fit
        gone = InstanceInfo("p-gone", "prefill", f"127.0.0.1:{free_port()}", "h", "cpu:0")
        api.portal.call(fit.registry.register, gone)
        assert api.portal.call(fit.collect) == 0
        fit.refit()
        api.portal.call(fit.publish)
        assert api.get("/v1/model").json()["kinds"] == {}
    assert json.loads(redis.Redis.from_url(db_url).get(MODEL_KEY))["kinds"] == {}
    assert TestClient(create_app(PlannerSettings(workers=1))).get("/v1/model").status_code == 400
