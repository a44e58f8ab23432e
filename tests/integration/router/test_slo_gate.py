"""The router's admission gate over a real Redis: the planner's model and every router's booked loads read in the
background, this router's own bookings added at once, no Redis call on the request's path."""

import asyncio
import json
import re

import pytest

from services.common.errors import SloUnmet
from services.common.registry import MODEL_KEY, InstanceInfo, Registry
from services.common.sampling import SamplingParams
from services.common.slo import SLO
from services.router.dispatch import Dispatcher
from services.router.gate import SloGate
from services.router.margin import ErrorWindow
from services.router.request import RouterRequest

MODEL = {"fitted_at": 1.0, "kinds": {
    "prefill@cpu:0": {"prefill": {"c0": 0.01, "per_token": 1e-4, "per_sq": 0.0}, "decode": None},
    "decode@cpu:1": {"prefill": None, "decode": {"c0": 0.004, "per_ctx": 0.0, "per_req": 1e-3}}}}


@pytest.fixture
async def registry(redis_url):
    registry = Registry.from_url(redis_url.rsplit("/", 1)[0] + "/9", ttl_s=60)
    await registry.redis.flushdb()
    await registry.register(InstanceInfo("p0", "prefill", "127.0.0.1:1", "h", "cpu:0"))
    await registry.register(InstanceInfo("d0", "decode", "127.0.0.1:2", "h", "cpu:1"))
    yield registry
    await registry.redis.flushdb()
    await registry.close()


def _request(prompt: int = 100) -> RouterRequest:
    return RouterRequest("r", list(range(prompt)), SamplingParams(max_tokens=20))


async def test_the_gate_predicts_from_the_stored_model_and_the_booked_loads(registry):
    dispatcher = Dispatcher(registry)
    await dispatcher.refresh()
    gate = SloGate(registry, dispatcher, "refuse", SLO(ttft=0.2), batch_tokens=512)
    await gate.refresh()
    req = _request()
    gate.admit(req)  # no model stored yet: admitted unpredicted
    assert req.prediction is None and req.slo == SLO(ttft=0.2)

    await registry.redis.set(MODEL_KEY, json.dumps(MODEL))
    await registry.add_load("prefill", "p0", 900)  # another router's bookings
    await gate.refresh()
    await gate.refresh_loads()
    req = _request()
    gate.admit(req)
    # 900 queued + 100: three batches of whole prompts (462 tokens each on average: 512 less half a prompt)
    assert req.prediction.ttft_s == pytest.approx(3 * 0.01 + 1000 * 1e-4)
    # an idle decode instance, but the 900 queued prompt tokens are 9 requests of the mix (the one admitted: 100
    # + 20 tokens) on their way to it: a step of 10
    assert req.prediction.tpot_s == pytest.approx(0.004 + 10 * 1e-3)

    # this router books 1000 more, seen before the next read: 2000 tokens, the running batch and four more
    assignment = await dispatcher.acquire("prefill", 1000)
    with pytest.raises(SloUnmet) as refused:
        gate.admit(_request())
    # 260 ms, less the time its running step has run since this router booked it, plus the prompts foreseen to
    # join this one's batch at the rate this test admitted them (at most its room: 210 tokens, 21 ms)
    predicted = re.search(r"predicted TTFT ([\d.]+) ms > SLO 200 ms", str(refused.value))
    assert predicted and 250 < float(predicted.group(1)) <= 281 and refused.value.retry_after_s == 1.0
    # its running step began at its first booking there: the time since counts off the prediction
    await asyncio.sleep(0.05)
    (busy,) = gate._candidates("prefill")
    assert 0.05 <= busy.running_s < 1.0
    await dispatcher.release(assignment)
    assert gate._candidates("prefill")[0].running_s == 0.0  # none of this router's own left: unknown
    await gate.refresh_loads()
    gate.admit(_request())
    await dispatcher.close()


async def test_the_errors_of_finished_requests_become_the_margin(registry):
    """Requests that came in 150 ms later than predicted: with their 0.9-quantile error added, a request the bare
    model admits is refused."""
    dispatcher = Dispatcher(registry)
    await dispatcher.refresh()
    await registry.redis.set(MODEL_KEY, json.dumps(MODEL))
    gate = SloGate(registry, dispatcher, "refuse", SLO(ttft=0.1), batch_tokens=512,
                   errors=ErrorWindow(0.9, least=5))
    await gate.refresh()
    await gate.refresh_loads()
    for _ in range(5):
        req = _request()
        gate.admit(req)  # predicted 20 ms
        life = req.lifetime
        life.arrival, life.first_token, life.finish = 10.0, 10.0 + req.prediction.ttft_s + 0.15, 11.0
        gate.finished(req, n_tokens=20)
    assert gate.errors.margin.ttft_s == pytest.approx(0.15)
    with pytest.raises(SloUnmet, match="recent error"):
        gate.admit(_request())
    await dispatcher.close()
