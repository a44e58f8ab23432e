"""The load generator joins each result with the router's record of it in a real Redis, by the client's id."""

import asyncio
import time

from services.bench.loadgen import RequestResult, attach_stages, stream_tail
from services.common.registry import Registry
from services.common.sampling import SamplingParams
from services.common.stamps import Lifetime
from services.router.request import RouterRequest


async def _record(redis_url: str, req: RouterRequest) -> None:
    registry = Registry.from_url(redis_url)
    try:
        await registry.record_request(req.record(3, "disagg"))
    finally:
        await registry.close()


def test_results_take_the_stages_of_the_records_the_router_writes(redis_url) -> None:
    tail = stream_tail(redis_url)
    stamps = Lifetime(arrival=1.0, prefill_queued=1.0, prefill_start=1.5, prefill_end=2.0, xfer_start=2.0,
                      xfer_end=2.25, decode_queued=2.0, decode_start=2.25, first_token=2.0, finish=3.0)
    # The router keys the request by its own id; the client's id travels as the label.
    req = RouterRequest("a1b2c3", [1, 2, 3], SamplingParams(), lifetime=stamps, label="bench-0")
    asyncio.run(_record(redis_url, req))
    result = RequestResult("bench-0", 3, output_tokens=3, sent=1.0, first=2.0, last=3.0)
    began = time.monotonic()
    attach_stages(redis_url, [result], tail, timeout_s=10.0)
    assert time.monotonic() - began < 5.0  # found, not waited out
    assert result.lifetime == stamps
    assert result.stages["prefill"] == 0.5 and result.stages["transfer"] == 0.25
