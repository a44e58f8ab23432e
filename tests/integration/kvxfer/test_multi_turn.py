"""A follow-up turn (turn 1's prompt, its answer and a new message) by each multi-turn path computes only what no
instance holds yet, gives the tokens and logprobs (within 1e-4) of the same turns with caching off, and leaves no
block held and no lease live."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from distserve.v1 import worker_pb2
from services.common.convert import sampling_to_proto
from tests.integration.kvxfer.multi_turn import PARAMS, Pair, Path, Turn, start_pair, turn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SYSTEM = [1, *range(100, 137)]  # 38 tokens: 9 full blocks of 4 and 2 over
NEW = [11, 12, 13, 14, 15]


@pytest.fixture
async def pairs(tiny_llama_dir: str, start_kvxfer) -> AsyncIterator[Callable[[str], Awaitable[Pair]]]:
    """Instance pairs with caching on or off, at one kvxfer."""
    host = await start_kvxfer()
    made: list[Pair] = []

    async def make(caching: str) -> Pair:
        made.append(await start_pair(tiny_llama_dir, host.address, f"mt{len(made)}", caching))
        return made[-1]

    yield make
    for pair in made:
        for close in pair.closers:
            await close()


async def conversation(pair: Pair, path: Path) -> tuple[Turn, Turn, tuple[int, int]]:
    """Turn 1 disaggregated, turn 2 by `path`; with the tokens each instance computed for turn 2."""
    first = await turn(pair, "t1", SYSTEM, "disagg")
    before = await pair.computed()
    second = await turn(pair, "t2", SYSTEM + first.tokens + NEW, path)
    after = await pair.computed()
    assert await pair.settled()
    return first, second, (after[0] - before[0], after[1] - before[1])


def assert_same(cached: Turn, cold: Turn) -> None:
    assert cached.tokens == cold.tokens
    assert cached.logprobs == pytest.approx(cold.logprobs, abs=1e-4)


async def test_a_local_prefill_computes_only_the_suffix_the_decode_cache_lacks(pairs) -> None:
    on, off = await pairs("on"), await pairs("off")
    first, second, computed = await conversation(on, "local")
    cold = await conversation(off, "local")
    assert_same(first, cold[0])
    assert_same(second, cold[1])
    # the decode holds turn 1's prompt and answer but the last answer token, whose K/V it never computed:
    # 11 full blocks of 4
    cached = 11 * 4
    prompt = len(SYSTEM) + len(first.tokens) + len(NEW)
    assert second.first.cached_tokens == cached and cold[1].first.cached_tokens == 0
    assert computed == (0, prompt - cached + len(second.tokens) - 1)
    assert cold[2] == (0, prompt + len(second.tokens) - 1)
    stamps = second.first.stamps
    assert stamps.prefill_queued <= stamps.prefill_start <= stamps.prefill_end <= stamps.decode_start
    assert not stamps.xfer_start


async def test_a_first_token_without_kv_is_refused(pairs) -> None:
    pair = await pairs("on")
    request = worker_pb2.DecodeRequest(request_id="x", prompt_token_ids=SYSTEM, first_token=5,
                                       sampling=sampling_to_proto(PARAMS))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        [c async for c in pair.decode.Decode(request)]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "first_token" in err.value.details()


async def test_a_delta_pull_moves_only_the_blocks_the_decode_cache_lacks(pairs) -> None:
    on, off = await pairs("on"), await pairs("off")
    bytes_before = (await on.kv.stats()).bytes_pulled
    first, second, computed = await conversation(on, "disagg")
    pulled = (await on.kv.stats()).bytes_pulled - bytes_before
    cold = await conversation(off, "disagg")
    assert_same(first, cold[0])
    assert_same(second, cold[1])
    prompt = len(SYSTEM) + len(first.tokens) + len(NEW)  # 51 tokens: 13 blocks, 11 of them cached at the decode
    assert (second.first.decode_cached_tokens, second.first.pulled_blocks) == (11 * 4, 2)
    assert (cold[1].first.decode_cached_tokens, cold[1].first.pulled_blocks) == (0, 13)
    block_bytes = on.decode_engine.engine.layout.block_bytes
    assert pulled == (10 + 2) * block_bytes  # turn 1's 10 blocks, turn 2's 2
    # the prefill finds turn 1's prompt (9 full blocks) in its own cache; the decode computes no prompt token
    assert computed == (prompt - 9 * 4, len(second.tokens) - 1)
    assert cold[2] == (prompt, len(second.tokens) - 1)


async def test_a_delta_pull_from_a_lease_gone_fails_and_frees_every_block(pairs) -> None:
    pair = await pairs("on")
    first = await turn(pair, "t1", SYSTEM, "disagg")
    prompt = SYSTEM + first.tokens + NEW
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(
        request_id="t2", prompt_token_ids=prompt, sampling=sampling_to_proto(PARAMS)))
    assert await pair.kv.release(prefilled.kv.lease_id)
    request = worker_pb2.DecodeRequest(request_id="t2", prompt_token_ids=prompt, first_token=prefilled.first_token,
                                       sampling=sampling_to_proto(PARAMS), kv=prefilled.kv)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        [c async for c in pair.decode.Decode(request)]
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert await pair.settled()
    assert (await pair.decode_engine.stats()).blocks_cached == 11  # the cached blocks it held stay cached


async def test_a_reverse_pull_computes_only_what_neither_instance_holds(pairs) -> None:
    on, off = await pairs("on"), await pairs("off")
    first, second, computed = await conversation(on, "reverse")
    cold = await conversation(off, "reverse")
    assert_same(first, cold[0])
    assert_same(second, cold[1])
    prompt = len(SYSTEM) + len(first.tokens) + len(NEW)
    # the decode leases its 11 cached blocks; the prefill has turn 1's 9 itself and pulls the other 2, computes 7
    assert (second.prefilled.cached_tokens, second.prefilled.pulled_blocks) == (11 * 4, 2)
    assert computed == (prompt - 11 * 4, len(second.tokens) - 1)
    assert (second.first.decode_cached_tokens, second.first.pulled_blocks) == (11 * 4, 2)  # then the decode's delta pull
    assert (cold[1].prefilled.cached_tokens, cold[1].prefilled.pulled_blocks) == (0, 0)
    assert cold[2] == (prompt, len(second.tokens) - 1)


async def test_a_leased_prefix_gone_costs_a_recompute_and_an_unpulled_one_expires(pairs) -> None:
    pair = await pairs("on")
    first = await turn(pair, "t1", SYSTEM, "disagg")
    prompt = SYSTEM + first.tokens + NEW
    leased = await pair.decode.LeasePrefix(worker_pb2.LeasePrefixRequest(prompt_token_ids=prompt, ttl_s=0.3))
    assert leased.kv.num_tokens == 11 * 4 and (await pair.decode_engine.stats()).blocks_used == 11
    assert await pair.settled()  # expired unpulled: the decode's blocks go back (cached)

    before = await pair.computed()
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(
        request_id="t2", prompt_token_ids=prompt, sampling=sampling_to_proto(PARAMS), prefix=leased.kv))
    assert (prefilled.cached_tokens, prefilled.pulled_blocks) == (9 * 4, 0)  # its own cache only
    assert (await pair.computed())[0] - before[0] == len(prompt) - 9 * 4
    assert await pair.kv.release(prefilled.kv.lease_id)
    assert await pair.settled()


async def test_kv_under_hashes_that_are_not_the_prompts_joins_no_cache(pairs) -> None:
    """A decode caches pulled blocks only under the handle's hashes, and only when they are the prompt's own in the
    request's namespace; a prefill pulls a leased prefix only on the same condition. Else each computes or decodes
    as without a cache, to the same tokens."""
    pair = await pairs("on")
    sampling = sampling_to_proto(PARAMS)
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(  # addressed in the default namespace
        request_id="t1", prompt_token_ids=SYSTEM, sampling=sampling))
    assert len(prefilled.kv.block_hashes) == len(SYSTEM) // 4
    chunks = [c async for c in pair.decode.Decode(worker_pb2.DecodeRequest(
        request_id="t1", prompt_token_ids=SYSTEM, sampling=sampling, first_token=prefilled.first_token,
        kv=prefilled.kv, cache_namespace="tenant:b"))]
    first = [prefilled.first_token, *(t for c in chunks for t in c.token_ids)]
    assert (await pair.decode_engine.stats()).blocks_cached == 0
    assert not (await pair.decode.LeasePrefix(worker_pb2.LeasePrefixRequest(
        prompt_token_ids=SYSTEM, cache_namespace="tenant:b"))).HasField("kv")
    assert await pair.settled()

    assert (await turn(pair, "t1b", SYSTEM, "disagg")).tokens == first  # now cached at the decode, truly named
    prompt = SYSTEM + first + NEW
    leased = await pair.decode.LeasePrefix(worker_pb2.LeasePrefixRequest(prompt_token_ids=prompt))
    assert len(leased.kv.block_hashes) == 11
    leased.kv.block_hashes[10] = bytes(32)
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(
        request_id="t2", prompt_token_ids=prompt, sampling=sampling, prefix=leased.kv))
    assert (prefilled.cached_tokens, prefilled.pulled_blocks) == (9 * 4, 0)  # its own cache only
    assert await pair.kv.release(prefilled.kv.lease_id)
    assert await pair.settled()
