"""A pipeline instance with its stages on two hosts: each stage's pool registered and leased at its own host's
kvxfer (kv_shards.py), the handle naming per shard where it is served; a puller on the second host pulls its
host's pools as local ranges and the other host's by a cross-host range order, byte-exact, and both leases end."""

from __future__ import annotations

import asyncio
import subprocess
from functools import partial

import pytest
import torch

from services.common.kv_layout import KVLayout
from services.decode.reshard import reshard_copies
from services.engine.parallel.pools import RankPool
from services.engine.parallel.shard import Span
from services.instance.kv_shards import (
    PoolShard,
    copies_by_source,
    pool_sites,
    register_site,
    shards_from_handle,
    shards_to_pb,
    with_site_leases,
)
from services.instance.pool_keeper import PoolKeeper
from services.kvxfer.local import ROOT
from tests.integration.kvxfer.conftest import LAYOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

STAGE = KVLayout(LAYOUT.num_blocks, 1, LAYOUT.block_size, LAYOUT.num_kv_heads, LAYOUT.head_dim)  # one layer of two


async def test_stages_on_two_hosts_are_pulled_from_each_hosts_kvxfer_under_its_lease(start_kvxfer, make_pool,
                                                                                       clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    stages = [make_pool("pp0", STAGE), make_pool("pp0.r1", STAGE)]
    pools = [RankPool(r, Span(r, 1), Span(0, LAYOUT.num_kv_heads), STAGE, p.path, torch.device("cpu"),
                      kvxfer=host_b.address if r else "") for r, p in enumerate(stages)]
    sites = pool_sites("pp0", pools)
    assert [(s.kvxfer, s.anchor, [p.rank for p in s.pools]) for s in sites] == [
        ("", "pp0", [0]), (host_b.address, "pp0.r1", [1])]
    for client, site in zip((a, b), sites):
        await register_site(client, "pp0", site)
        await register_site(client, "pp0", site)  # idempotent: kvxfer restarts are met by registering again
    assert ((await a.stats()).pools, (await b.stats()).pools) == (1, 1)
    dst = make_pool("dec0", fill=False)
    await b.register_pool("dec0", dst)
    src_blocks, dst_blocks = [5, 6, 40, 2], [9, 10, 30, 0]

    handle = await a.create_lease("pp0", src_blocks, num_tokens=60)
    remote = await b.create_lease("pp0.r1", src_blocks, num_tokens=60)
    handle.shards.extend(shards_to_pb("pp0", pools))
    with_site_leases(handle, {host_b.address: remote})
    assert [(s.kvxfer_address, s.lease_id, s.lease_instance_id) for s in handle.shards] == [
        ("", "", ""), (host_b.address, remote.lease_id, "pp0.r1")]

    copies = reshard_copies(shards_from_handle(handle), src_blocks,
                            [PoolShard("dec0", Span(0, 2), Span(0, LAYOUT.num_kv_heads), LAYOUT)], dst_blocks)
    parts = copies_by_source(handle, copies)
    assert [(s.kvxfer_address, s.lease_id, [c.src_pool for c in cs]) for s, cs in parts] == [
        (host_a.address, handle.lease_id, ["pp0"]), (host_b.address, remote.lease_id, ["pp0.r1"])]
    results = [await b.pull_ranges(source, part, checksum=True, timeout_s=20) for source, part in parts]

    assert [r.path for r in results] == ["cross-host", "same-host"]
    want = torch.cat([s.tensor[src_blocks] for s in stages], dim=1)  # stage 0's layer, then stage 1's
    assert torch.equal(dst.tensor[dst_blocks], want)
    async with asyncio.timeout(5):  # A's lease ends at B's ack, B's at its copy
        while (await a.stats()).live_leases + (await b.stats()).live_leases:
            await asyncio.sleep(0.01)


async def test_a_sites_pools_are_registered_again_when_its_kvxfer_restarts(start_kvxfer, make_pool, clients) -> None:
    host_b = await start_kvxfer()
    b = clients(host_b.address)
    stage = make_pool("pk0.r1", STAGE)
    pools = [RankPool(0, Span(0, 1), Span(0, 2), STAGE, None, torch.device("cpu")),
             RankPool(1, Span(1, 1), Span(0, 2), STAGE, stage.path, torch.device("cpu"), kvxfer=host_b.address)]
    site = pool_sites("pk0", pools)[1]
    keeper = PoolKeeper(b, site.anchor, partial(register_site, b, "pk0", site))
    await keeper.register()
    assert await keeper.check()

    host_b.kill()
    assert not await keeper.check()
    host_b.proc = subprocess.Popen(host_b.proc.args, cwd=ROOT)  # the same port: a restart on that host
    await b.wait_ready()

    assert await keeper.check()
    assert (await b.stats()).pools == 1
    assert list((await b.create_lease("pk0.r1", [1], num_tokens=16)).block_ids) == [1]  # leasable under its anchor
