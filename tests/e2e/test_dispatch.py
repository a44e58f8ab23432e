"""With 2 prefill and 2 decode instances the router sends work to the shortest prefill queue and the
least-loaded decode instance, as the recorded requests in Redis show."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis

from tests.e2e.helpers import generate, recorded_requests, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", prefill=2, decode=2) as stack:
        yield stack


async def _until_a_decode_is_loaded(book: redis.Redis, timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):  # a request that never reaches decode fails here, not at the test timeout
        while not any(load > 0 for _, load in book.zrange("ds:load:decode", 0, -1, withscores=True)):
            await asyncio.sleep(0.01)


async def test_dispatch_follows_load(stack) -> None:
    # A long decode holds its decode instance's load (prompt + max_tokens) for its whole life ...
    long = asyncio.create_task(generate(stack.router_address, "x " * 8, request_id="long", max_tokens=1500,
                                        ignore_eos=True, temperature=0.0))
    book = redis.Redis.from_url(stack.redis_url)
    await _until_a_decode_is_loaded(book)
    # ... so short requests sent one after another meanwhile all go to the other decode instance.
    for i in range(4):
        await generate(stack.router_address, "short", request_id=f"short-{i}", max_tokens=4, temperature=0.0)
    # A burst of equal prompts splits evenly between the two prefill queues.
    await asyncio.gather(*(generate(stack.router_address, "y" * 1000, request_id=f"burst-{i}", max_tokens=2,
                                    temperature=0.0) for i in range(8)))
    await long
    records = {r["label"]: r for r in recorded_requests(stack.redis_url)}  # the clients' ids are labels
    long_decode = records["long"]["decode_instance"]
    assert {records[f"short-{i}"]["decode_instance"] for i in range(4)} == {
        p.name for p in stack.procs if p.role == "decode"} - {long_decode}
    burst = Counter(records[f"burst-{i}"]["prefill_instance"] for i in range(8))
    assert len(burst) == 2 and min(burst.values()) >= 3  # 4/4 unless a prefill ended between picks
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


async def test_decode_instance_killed_mid_stream_loses_and_repeats_no_token(stack, tiny_llama_dir: str) -> None:
    """Runs last in this module: it kills an instance."""
    from services.common.sampling import SamplingParams
    from services.common.tokenizer import load_tokenizer
    from services.engine.engine import EngineConfig, LLMEngine

    prompt, n = "survive this", 600
    task = asyncio.create_task(generate(stack.router_address, prompt, request_id="victim", max_tokens=n,
                                        ignore_eos=True, temperature=0.0))
    book = redis.Redis.from_url(stack.redis_url)
    await _until_a_decode_is_loaded(book)
    busy = max(book.zrange("ds:load:decode", 0, -1, withscores=True), key=lambda kv: kv[1])[0].decode()
    next(p for p in stack.procs if p.name == busy).process.kill()
    responses = await task
    got = [t for r in responses for t in r.token_ids]
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=256))
    (want,) = engine.generate([load_tokenizer(tiny_llama_dir).encode(prompt)], SamplingParams(max_tokens=n, ignore_eos=True))
    engine.close()
    assert got == want
