"""Prefix caching through the disaggregated stack: the index in Redis, the pick by the model, salts, API keys."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import redis

from services.common.api_keys import ApiKeys, add_key, revoke_key
from services.common.prefix_hash import block_hashes
from services.common.registry import Registry
from services.launcher.stack import Stack
from services.router.request import cache_namespace
from tests.e2e.helpers import generate, recorded_requests, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
DB = 7
CONVERSATION = [1, *(3 + (i * 29) % 250 for i in range(120))]  # 121 tokens: 7 full blocks of 16 before the last


KEYS: dict[str, str] = {}  # the stack's API keys by name; "tests" asks unless a test says otherwise


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys"
    KEYS.update({name: add_key(path, name) for name in ("tests", "alice", "bob")})
    return path


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str, key_file: Path) -> Iterator[Stack]:
    only_pulls = {"DISTSERVE_ROUTER_LOCAL_PREFILL_TOKENS": "0", "DISTSERVE_ROUTER_REVERSE_PULL_TOKENS": "0"}
    with running_stack(tiny_llama_dir, f"{redis_url.rsplit('/', 1)[0]}/{DB}", prefill=2, decode=1,
                       extra_env=only_pulls, api_key_file=str(key_file)) as stack:
        yield stack  # the prefill pick alone (the paths: test_multi_turn.py)


async def _ask(stack: Stack, prompt_ids: list[int], key: str = "tests", **fields) -> tuple[list[int], int]:
    responses = await generate(stack.router_address, prompt_ids=prompt_ids, api_key=KEYS[key], max_tokens=6,
                               temperature=0, ignore_eos=True, **fields)
    return [t for r in responses for t in r.token_ids], responses[-1].cached_tokens


async def _indexed(stack: Stack, instance_id: str, tokens: list[int], timeout_s: float = 5.0) -> bool:
    """Whether the index lists the blocks of `tokens` (asked with the "tests" key) for the instance within
    `timeout_s`."""
    registry = Registry.from_url(stack.redis_url)
    tenant = ApiKeys(stack.config.api_key_file).tenant(f"Bearer {KEYS['tests']}")
    wanted = set(block_hashes(tokens, 16, cache_namespace(tenant, None)))
    try:
        deadline = time.monotonic() + timeout_s
        while not wanted <= await registry.cache.hashes(instance_id):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True
    finally:
        await registry.close()


async def test_follow_ups_go_where_their_prefix_is_cached_and_give_the_same_tokens(stack: Stack) -> None:
    # The load book breaks ties by name: the conversation starts on the other instance (another router's booking
    # on the first, for its first turn only), so that follow-ups routed by the book alone would leave it.
    by_name, other = sorted(p.name for p in stack.procs if p.role == "prefill")
    registry = Registry.from_url(stack.redis_url)
    await registry.add_load("prefill", by_name, 1e6, "another-router")
    await asyncio.sleep(0.5)  # the router's gate reads the booked loads every 50 ms: at least once on a busy host
    try:
        first, cached = await _ask(stack, CONVERSATION)
    finally:
        await registry.add_load("prefill", by_name, -1e6, "another-router")
        await registry.close()
    assert cached == 0
    held_by = recorded_requests(stack.redis_url)[-1]["prefill_instance"]
    assert held_by == other
    assert await _indexed(stack, held_by, CONVERSATION)
    for turn in range(4):
        follow_up = CONVERSATION + [5 + turn] * 20
        tokens, cached = await _ask(stack, follow_up)
        assert recorded_requests(stack.redis_url)[-1]["prefill_instance"] == held_by
        assert cached == 7 * 16
        salted, salted_cached = await _ask(stack, follow_up, cache_salt=f"other-{turn}")
        assert salted_cached == 0 and salted == tokens  # computed from scratch: the same greedy tokens
    assert all(s.blocks_used == 0 for s in await wait_idle(stack))


async def test_api_keys_share_no_cache_not_even_a_key_reissued_under_the_same_name(stack: Stack, key_file: Path) -> None:
    prompt = [1, *(9 + (i * 31) % 240 for i in range(80))]  # 81 tokens: 5 full blocks of 16 before the last
    tokens, cached = await _ask(stack, prompt, "alice")
    assert cached == 0
    assert await _ask(stack, prompt, "alice") == (tokens, 5 * 16)
    assert await _ask(stack, prompt, "bob") == (tokens, 0)
    revoke_key(key_file, "alice")
    KEYS["alice"] = add_key(key_file, "alice")
    deadline = time.monotonic() + 10
    while True:
        try:
            assert await _ask(stack, prompt, "alice") == (tokens, 0)
            break
        except grpc.aio.AioRpcError as exc:  # the router re-reads its key file within a second
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED and time.monotonic() < deadline
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("salt", ["", "s" * 257], ids=["empty", "257-characters"])
async def test_a_cache_salt_empty_or_over_256_characters_is_refused(stack: Stack, salt: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _ask(stack, CONVERSATION, cache_salt=salt)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "cache_salt" in err.value.details()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.config.http_port}") as client:
        response = await client.post("/v1/completions", headers={"authorization": f"Bearer {KEYS['tests']}"},
                                     json={"prompt": CONVERSATION, "max_tokens": 2, "cache_salt": salt})
    assert response.status_code == 400 and "cache_salt" in response.text


async def test_the_index_is_rebuilt_after_redis_restarts_empty_and_lapses_with_its_instance(stack: Stack) -> None:
    await _ask(stack, CONVERSATION[:60])
    held_by = recorded_requests(stack.redis_url)[-1]["prefill_instance"]
    assert await _indexed(stack, held_by, CONVERSATION[:60])
    redis.Redis.from_url(stack.redis_url).flushdb()  # what a restarted Redis without persistence holds
    assert await _indexed(stack, held_by, CONVERSATION[:60])
    proc = next(p for p in stack.procs if p.name == held_by)
    proc.stopping = True
    proc.process.kill()
    killed = time.monotonic()
    registry = Registry.from_url(stack.redis_url)
    while await registry.cache.hashes(held_by):
        assert time.monotonic() - killed < 5.0, "the dead instance's index entries outlived 5 s"
        await asyncio.sleep(0.1)
    await registry.close()


async def test_a_router_set_not_to_report_cached_tokens_tells_clients_none(stack: Stack) -> None:
    prompt = [1, *(11 + (i * 37) % 240 for i in range(80))]  # 81 tokens: 5 full blocks of 16 before the last
    tokens, _ = await _ask(stack, prompt)
    held_by = recorded_requests(stack.redis_url)[-1]["prefill_instance"]
    assert await _indexed(stack, held_by, prompt)
    # the module's last test: its router stays so
    await asyncio.to_thread(stack.restart_router, {"DISTSERVE_ROUTER_REPORT_CACHED_TOKENS": "false"})
    assert await _ask(stack, prompt) == (tokens, 0)
    assert recorded_requests(stack.redis_url)[-1]["cached_tokens"] == str(5 * 16)  # the record keeps it
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.config.http_port}") as client:
        response = await client.post("/v1/completions", headers={"authorization": f"Bearer {KEYS['tests']}"},
                                     json={"prompt": prompt, "max_tokens": 2, "temperature": 0})
    assert response.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert recorded_requests(stack.redis_url)[-1]["cached_tokens"] == str(5 * 16)
