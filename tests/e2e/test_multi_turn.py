"""Follow-up turns on the disaggregated stack: the router sends each by the path the model predicts soonest
(local prefill, reverse pull, delta pull), each computes only the tokens no instance holds, and each gives the
tokens an uncached run gives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from services.common.prefix_hash import block_hashes
from services.common.registry import Registry
from services.launcher.stack import Stack
from tests.e2e.helpers import generate, instance_stats, recorded_requests, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
DB = 8
BLOCK = 16
PROMPT = [1, *(3 + (i * 31) % 250 for i in range(119))]  # 120 tokens


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str) -> Iterator[Stack]:
    with running_stack(tiny_llama_dir, f"{redis_url.rsplit('/', 1)[0]}/{DB}") as stack:
        yield stack


async def _turn(stack: Stack, prompt: list[int], max_tokens: int, **fields) -> tuple[list[int], int]:
    responses = await generate(stack.router_address, prompt_ids=prompt, max_tokens=max_tokens, temperature=0,
                               ignore_eos=True, **fields)
    return [t for r in responses for t in r.token_ids], responses[-1].cached_tokens


def _computed(stack: Stack) -> dict[str, int]:
    return {s.role: s.computed_tokens for s in instance_stats(stack)}


async def _indexed(stack: Stack, role: str, tokens: list[int]) -> None:
    """Waits until the index lists `tokens`' full blocks for the instance of `role` (it publishes at its beat)."""
    instance_id = next(p.name for p in stack.procs if p.role == role)
    wanted = set(block_hashes(tokens, BLOCK))
    registry = Registry.from_url(stack.redis_url)
    deadline = time.monotonic() + 5
    while not wanted <= await registry.cache.hashes(instance_id):
        assert time.monotonic() < deadline, f"the index never listed the {role}'s blocks"
        await asyncio.sleep(0.1)
    await registry.close()


async def _follow_up(stack: Stack, history: list[int], new: int, max_tokens: int,
                     prefill_holds: list[int]) -> tuple[dict, str, list[int], list[int]]:
    """Sends history + `new` tokens once the index lists what each instance holds; returns the instances'
    computed tokens, the path recorded, the prompt and the answer."""
    await _indexed(stack, "decode", history[: (len(history) - 1) // BLOCK * BLOCK])
    await _indexed(stack, "prefill", prefill_holds)
    prompt = history + [7 + (new * 7 + i * 13) % 200 for i in range(new)]  # a message of its own
    before = _computed(stack)
    tokens, _ = await _turn(stack, prompt, max_tokens)
    await wait_idle(stack)
    after = _computed(stack)
    path = recorded_requests(stack.redis_url)[-1]["path"]
    cold, cold_cached = await _turn(stack, prompt, max_tokens, cache_salt=f"cold-{time.time()}")
    assert cold_cached == 0 and tokens == cold
    return {role: after[role] - before[role] for role in after}, path, prompt, tokens


async def test_each_path_computes_only_what_no_instance_holds(stack: Stack) -> None:
    answer, _ = await _turn(stack, PROMPT, 48)
    history = PROMPT + answer  # 168 tokens; decode holds 10 blocks (the last answer token's K/V: never computed)
    held = (len(history) - 1) // BLOCK * BLOCK

    # a short new message: the decode instance prefills it itself
    computed, path, prompt, _ = await _follow_up(stack, history, 10, 4, PROMPT)
    assert path == "local"
    assert computed == {"prefill": 0, "decode": len(prompt) - held + 3}

    # a long one, the decode holding 48 tokens more than the prefill (turn 1's prompt): reverse pull
    computed, path, prompt, answer2 = await _follow_up(stack, history, 100, 20, PROMPT)
    assert path == "reverse"
    assert computed == {"prefill": len(prompt) - held, "decode": 19}

    # the next turn: the prefill holds the last prompt, the decode 1 block more (its answer): delta pull
    history = prompt + answer2
    computed, path, prompt, _ = await _follow_up(stack, history, 100, 4, prompt)
    assert path == "delta"
    prefill_held = (len(history) - len(answer2)) // BLOCK * BLOCK
    assert computed == {"prefill": len(prompt) - prefill_held, "decode": 3}
    assert all(s.blocks_used == 0 for s in await wait_idle(stack))
