"""A prefill whose pools lie at two kvxfers (a stage on another host) leases each request's blocks at both, and
gives the blocks back only once both leases have ended; when one lease cannot be made, the other is released
and the blocks come back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from distserve.v1 import kv_pb2
from services.common.errors import Unavailable
from services.common.pool_files import shm_path
from services.common.sampling import SamplingParams
from services.engine.async_engine import AsyncEngine
from services.engine.engine import EngineConfig, LLMEngine
from services.prefill.core import PrefillCore
from tests.integration.kvxfer.conftest import LAYOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
PROMPT = list(range(1, 40))


@pytest.fixture
async def engine(tiny_llama_dir: str) -> AsyncIterator[AsyncEngine]:
    engine = AsyncEngine(LLMEngine(EngineConfig(tiny_llama_dir, policy="prefill", num_blocks=LAYOUT.num_blocks,
                                                pool_path=shm_path("pf"))))
    yield engine
    engine.stop()
    engine.engine.close()


async def _blocks_used(engine: AsyncEngine, want: int) -> int:
    """The engine's blocks in use, once they equal `want` (or after 5 s)."""
    async with asyncio.timeout(5):
        while (used := (await engine.stats()).blocks_used) != want:
            await asyncio.sleep(0.02)
    return used


async def _core(engine, start_kvxfer, make_pool, clients, site_up: bool):
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    await a.register_pool("pf", engine.pool_sites()[0])
    await b.register_pool("pf.r1", make_pool("pf.r1").site)
    if not site_up:
        host_b.stop()
    shards = [kv_pb2.KVShard(pool_id="pf", rank=0),
              kv_pb2.KVShard(pool_id="pf.r1", rank=1, kvxfer_address=host_b.address, lease_instance_id="pf.r1")]
    core = PrefillCore(engine, a, "pf", lease_ttl_s=60, max_pending=4, pull_timeout_s=5, shards=shards,
                       sites=[(b, "pf.r1")])
    core.start()
    return core, a, b


async def test_blocks_come_back_once_the_lease_at_every_site_ended(engine, start_kvxfer, make_pool, clients) -> None:
    core, a, b = await _core(engine, start_kvxfer, make_pool, clients, site_up=True)
    try:
        result = await core.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
        held = (await engine.stats()).blocks_used
        assert held > 0 and ((await a.stats()).live_leases, (await b.stats()).live_leases) == (1, 1)
        remote = result.handle.shards[1]
        assert (remote.kvxfer_address, remote.lease_instance_id) == (b.address, "pf.r1") and remote.lease_id
        assert await a.release(result.handle.lease_id)
        await asyncio.sleep(0.3)
        assert (await engine.stats()).blocks_used == held  # site B's lease still holds them
        assert await b.release(remote.lease_id)
        assert await _blocks_used(engine, 0) == 0
    finally:
        await core.stop()


async def test_a_lease_that_cannot_be_made_releases_the_others(engine, start_kvxfer, make_pool, clients) -> None:
    core, a, _ = await _core(engine, start_kvxfer, make_pool, clients, site_up=False)
    try:
        with pytest.raises(Unavailable):
            await core.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
        assert await _blocks_used(engine, 0) == 0
        assert (await a.stats()).live_leases == 0
    finally:
        await core.stop()
