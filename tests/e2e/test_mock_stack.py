"""`distserve up --engine mock`: the real router, Redis and load book in front of 32 mock instances in one process;
requests are served and recorded, bad input is refused by the router naming the field."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from services.launcher.stack import Stack
from tests.e2e.helpers import generate, recorded_requests, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str) -> Iterator[Stack]:
    with running_stack(tiny_llama_dir, redis_url, engine="mock", prefill=16, decode=16) as started:
        yield started


async def test_a_mock_stack_serves_and_records_requests(stack: Stack, redis_url: str) -> None:
    assert [p.name for p in stack.procs] == ["mocks", "router"]
    for i in range(4):
        responses = await generate(stack.router_address, prompt_ids=list(range(5 + i, 69 + i)), max_tokens=6)
        assert sum(len(r.token_ids) for r in responses) == 6
    records = recorded_requests(redis_url)
    assert len(records) == 4 and all(r["prefill_instance"].startswith("mock-prefill-") for r in records)
    assert all(r["decode_instance"].startswith("mock-decode-") for r in records)


async def test_bad_input_is_refused_naming_the_field(stack: Stack) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await generate(stack.router_address, prompt_ids=[1, 2, 3], max_tokens=0)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in refused.value.details()
