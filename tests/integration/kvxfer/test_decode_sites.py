"""A decode instance whose stages' pools lie at two kvxfers (a stage on another host) pulls each pool's part
through that pool's kvxfer, both from the prefill's one lease, which ends once both are in. When one of those
kvxfers is down the request fails, every reserved block comes back, and the lease stays for the router to
release; a source site that only holds replicas read elsewhere may be down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from distserve.v1 import kv_pb2
from services.common.net import free_port
from services.common.pool_files import shm_path
from services.common.prefix_hash import block_hashes, to_wire
from services.common.sampling import SamplingParams
from services.decode.core import DecodeCore
from services.engine.async_engine import AsyncEngine
from services.engine.engine import EngineConfig, LLMEngine
from services.instance.kv_shards import by_site, instance_pools, register_site
from services.kvxfer.client import PullFailed
from tests.integration.kvxfer.conftest import LAYOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
PROMPT = list(range(1, 40))


@pytest.fixture
async def engine(tiny_llama_dir: str) -> AsyncIterator[AsyncEngine]:
    engine = AsyncEngine(LLMEngine(EngineConfig(tiny_llama_dir, policy="decode", num_blocks=LAYOUT.num_blocks,
                                                pool_path=shm_path("dc"), pp=2)))
    yield engine
    engine.stop()
    engine.engine.close()


async def _setup(engine: AsyncEngine, start_kvxfer, make_pool, clients):
    """Stage 0's pool at kvxfer A, stage 1's at kvxfer B; a prefill's one pool (every layer) at A, leased."""
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    pools = {pid: replace(p, kvxfer=host_b.address if pid != "dc" else "")
             for pid, p in instance_pools("dc", engine, "").items()}
    for client, site in zip((a, b), by_site(pools)):
        await register_site(client, "dc", site)
    src = make_pool("pf", replace(pools["dc"].layout, num_layers=sum(p.layers.count for p in pools.values())))
    await a.register_pool("pf", src.site)
    core = DecodeCore(engine, a, "dc", pull_timeout_s=5, max_pending=4, pools=pools, kv_of={"dc.r1": b})
    handle = await a.create_lease("pf", [3, 4, 5], num_tokens=len(PROMPT))
    handle.block_hashes.extend(_hashes())
    return core, handle, host_b, a, b


def _hashes() -> list[bytes]:
    """The hashes a prefill's handle carries with PROMPT's full blocks."""
    return to_wire(block_hashes(PROMPT, 16))


async def _decode(core: DecodeCore, handle) -> list[int]:
    return [t for chunk in [c async for c in core.decode("r1", PROMPT, 7, SamplingParams(max_tokens=3), handle)]
            for t in chunk.token_ids]


async def _all_blocks_back(engine: AsyncEngine) -> bool:
    """Whether the engine holds no block within 5 s."""
    try:
        async with asyncio.timeout(5):
            while (await engine.stats()).blocks_used:
                await asyncio.sleep(0.02)
    except TimeoutError:
        return False
    return True


async def test_each_stage_is_filled_through_its_own_kvxfer_and_the_lease_ends_after_both(
        engine, start_kvxfer, make_pool, clients) -> None:
    core, handle, _, a, b = await _setup(engine, start_kvxfer, make_pool, clients)

    assert len(await _decode(core, handle)) == 2  # the first of max_tokens 3 came with the prefill

    stats = [await a.stats(), await b.stats()]
    assert [(s.pulls_ok, s.pulls_failed) for s in stats] == [(1, 0), (1, 0)]  # A's copy local, B's across
    assert stats[0].live_leases == 0 and await _all_blocks_back(engine)


async def test_a_stage_kvxfer_down_fails_the_request_and_gives_every_block_back(
        engine, start_kvxfer, make_pool, clients) -> None:
    core, handle, host_b, a, _ = await _setup(engine, start_kvxfer, make_pool, clients)
    host_b.stop()

    with pytest.raises(PullFailed):
        await _decode(core, handle)

    assert await _all_blocks_back(engine)
    assert (await a.stats()).live_leases == 1  # half of its pull done: kept, for a retry or the router's release
    assert await a.release(handle.lease_id)


async def test_a_source_site_read_nothing_of_may_be_down(engine, start_kvxfer, make_pool, clients) -> None:
    core, handle, _, a, _ = await _setup(engine, start_kvxfer, make_pool, clients)
    full = handle.layout  # the prefill's rank 1 holds a replica of every layer and head, at a kvxfer gone away
    whole = {"layer_start": 0, "num_layers": full.num_layers, "kv_head_start": 0, "num_kv_heads": full.num_kv_heads}
    handle.shards.extend([kv_pb2.KVShard(pool_id="pf", rank=0, **whole),
                          kv_pb2.KVShard(pool_id="pf.r1", rank=1, kvxfer_address=f"127.0.0.1:{free_port()}",
                                         lease_id="gone", lease_instance_id="pf.r1", **whole)])

    assert len(await _decode(core, handle)) == 2

    assert (await a.stats()).live_leases == 0 and await _all_blocks_back(engine)


async def test_a_follow_up_pulls_only_the_blocks_its_stages_lack(engine, start_kvxfer, make_pool, clients) -> None:
    """The first request's prompt blocks stay cached (in both stages' pools, under the same ids): the second pulls
    only the last block, each stage's part through its own kvxfer."""
    core, handle, _, a, b = await _setup(engine, start_kvxfer, make_pool, clients)
    await _decode(core, handle)
    full = [(await a.stats()).bytes_pulled, (await b.stats()).bytes_pulled]
    again = await a.create_lease("pf", [6, 7, 8], num_tokens=len(PROMPT))
    again.block_hashes.extend(_hashes())
    chunks = [c async for c in core.decode("r2", PROMPT, 7, SamplingParams(max_tokens=3), again)]
    assert (chunks[0].decode_cached_tokens, chunks[0].pulled_blocks) == (32, 1)  # 39 tokens: 2 full blocks of 16 cached
    delta = [(await a.stats()).bytes_pulled - full[0], (await b.stats()).bytes_pulled - full[1]]
    assert delta == [full[0] // 3, full[1] // 3]
    assert (await a.stats()).live_leases == 0 and await _all_blocks_back(engine)
