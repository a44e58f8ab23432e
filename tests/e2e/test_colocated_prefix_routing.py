"""Colocated and chunked instances publish their prefix-cache index, and the router picks among them by it: a
conversation's follow-ups go to the instance holding its prefix (on each mode's shared stack of two instances; the
disaggregated pick: test_prefix_routing.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.common.prefix_hash import block_hashes
from services.common.registry import Registry
from services.launcher.stack import Stack
from tests.e2e.helpers import generate, recorded_requests, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
CONVERSATION = [1, *(5 + (i * 43) % 250 for i in range(120))]  # 121 tokens: 7 full blocks of 16 before the last


async def _indexed(registry: Registry, instance_id: str, tokens: list[int], timeout_s: float = 5.0) -> bool:
    """Whether the index lists the blocks of `tokens` for the instance within `timeout_s` (its next beat)."""
    deadline = time.monotonic() + timeout_s
    while not set(block_hashes(tokens, 16)) <= await registry.cache.hashes(instance_id):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _ask(address: str, prompt_ids: list[int]) -> tuple[list[int], int]:
    responses = await generate(address, prompt_ids=prompt_ids, max_tokens=6, temperature=0, ignore_eos=True)
    return [t for r in responses for t in r.token_ids], responses[-1].cached_tokens


async def test_follow_ups_go_to_the_instance_holding_their_prefix(stack: Stack) -> None:
    mode = stack.config.mode
    if mode == "disagg":
        pytest.skip("the disaggregated pick: test_prefix_routing.py")
    prompt = [*CONVERSATION, len(mode)]  # a conversation of this mode's own
    # the book breaks ties by name: the conversation starts on the other instance (another router's booking)
    by_name, other = sorted(p.name for p in stack.procs if p.role == mode)
    registry = Registry.from_url(stack.redis_url)
    await registry.add_load(mode, by_name, 1e6, "another-router")
    try:
        assert (await _ask(stack.router_address, prompt))[1] == 0
    finally:
        await registry.add_load(mode, by_name, -1e6, "another-router")
    assert recorded_requests(stack.redis_url)[-1]["prefill_instance"] == other
    assert await _indexed(registry, other, prompt)
    await registry.close()
    for turn in range(3):
        _, cached = await _ask(stack.router_address, prompt + [5 + turn] * 20)
        assert recorded_requests(stack.redis_url)[-1]["prefill_instance"] == other
        assert cached == 7 * 16
    assert all(s.blocks_used == 0 for s in await wait_idle(stack))
