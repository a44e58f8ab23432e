"""Planner integration fixtures: a Redis database of the planner's own, the API on it, and request records
as the router writes them."""

import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient

from services.common.registry import REQUESTS_STREAM as STREAM
from services.planner.api import create_app
from services.planner.config import PlannerSettings


@pytest.fixture
def rds(redis_url):
    client = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/7")  # a database of the planner's own
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def api(rds):
    with TestClient(create_app(PlannerSettings(workers=1), rds)) as client:
        yield client


def _record(rds, n: int, rate: float, prompt: int, output: int, start: float = 1.7e9, cached: float = 0.0) -> float:
    """Append `n` request records with Poisson arrivals at `rate` req/s from `start` (prompt lengths
    prompt..prompt+6, the share `cached` of each found in the prefix cache), as the router writes them; returns
    the time where a next batch would continue."""
    gaps = np.random.default_rng(int(start)).exponential(1 / rate, n)
    for i, t in enumerate((start + np.cumsum(gaps) - gaps[0]).tolist()):
        rds.xadd(STREAM, {"request_id": f"r{start}-{i}", "prompt_tokens": str(prompt + i % 7),
                          "output_tokens": str(output),
                          "cached_tokens": str(int(cached * (prompt + i % 7))), "arrival": repr(t), "prefill_queued": repr(t),
                          "prefill_start": repr(t), "prefill_end": repr(t + 0.1), "xfer_start": repr(t + 0.1),
                          "xfer_end": repr(t + 0.11), "decode_queued": repr(t + 0.11), "decode_start": repr(t + 0.11),
                          "first_token": repr(t + 0.1), "finish": repr(t + 2), "prefill_instance": "p0",
                          "decode_instance": "d0"}, maxlen=10000)
    return t + 1 / rate



@pytest.fixture
def record():
    return _record
