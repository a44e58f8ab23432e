"""A pipeline instance with its stages on two hosts: each stage's pool registered and leased at its own host's
kvxfer (kv_shards.py), the handle naming per shard where it is served; a puller on the second host pulls its
host's pools as local ranges and the other host's by a cross-host range order, byte-exact, and both leases end.
A puller with its stages on two hosts pulls each stage's part through that stage's kvxfer, from the one lease;
a source site whose pools are replicas read elsewhere has its lease ended at once."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import replace
from functools import partial

import pytest
import torch

from services.common.kv_layout import KVLayout
from services.common.pool_site import PoolSite, sites_from_handle
from services.common.span import Span
from services.decode.reshard import reshard_copies
from services.instance.kv_shards import by_site, register_site, shards_to_pb, site_pulls, with_site_leases
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
    pools = {pid: replace(p.site, layers=Span(r, 1), kvxfer=host_b.address if r else "")
             for r, (pid, p) in enumerate(zip(("pp0", "pp0.r1"), stages))}
    sites = by_site(pools)
    assert [(s.kvxfer, s.anchor, list(s.pools)) for s in sites] == [
        ("", "pp0", ["pp0"]), (host_b.address, "pp0.r1", ["pp0.r1"])]
    for client, site in zip((a, b), sites):
        await register_site(client, "pp0", site)
        await register_site(client, "pp0", site)  # idempotent: kvxfer restarts are met by registering again
    assert ((await a.stats()).pools, (await b.stats()).pools) == (1, 1)
    dst = make_pool("dec0", fill=False)
    await b.register_pool("dec0", dst.site)
    src_blocks, dst_blocks = [5, 6, 40, 2], [9, 10, 30, 0]

    handle = await a.create_lease("pp0", src_blocks, num_tokens=60)
    remote = await b.create_lease("pp0.r1", src_blocks, num_tokens=60)
    handle.shards.extend(shards_to_pb(pools))
    with_site_leases(handle, {host_b.address: remote})
    assert [(s.kvxfer_address, s.lease_id, s.lease_instance_id) for s in handle.shards] == [
        ("", "", ""), (host_b.address, remote.lease_id, "pp0.r1")]

    copies = reshard_copies(sites_from_handle(handle), src_blocks, {"dec0": dst.site}, dst_blocks)
    parts = site_pulls(handle, copies, b, {})
    assert [(p.kv, p.source.kvxfer_address, p.source.lease_id, [c.src_pool for c in p.copies], p.share)
            for p in parts] == [(b, host_a.address, handle.lease_id, ["pp0"], 1),
                                (b, host_b.address, remote.lease_id, ["pp0.r1"], 1)]
    results = [await p.kv.pull_ranges(p.source, p.copies, checksum=True, timeout_s=20) for p in parts]

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
    pools = {"pk0": PoolSite(STAGE, Span(0, 1), Span(0, 2), "cpu"),
             "pk0.r1": replace(stage.site, layers=Span(1, 1), kvxfer=host_b.address)}
    site = by_site(pools)[1]
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


async def _live_leases(*clients) -> list[int]:
    return [(await c.stats()).live_leases for c in clients]


async def test_a_puller_with_stages_on_two_hosts_fills_each_through_its_hosts_kvxfer_from_one_lease(
        start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    src = make_pool("one0")  # both layers, on host A
    await a.register_pool("one0", src.site)
    stages = [make_pool("dd0", STAGE, fill=False), make_pool("dd0.r1", STAGE, fill=False)]
    pools = {pid: replace(p.site, layers=Span(r, 1), kvxfer="" if r else host_a.address)
             for r, (pid, p) in enumerate(zip(("dd0", "dd0.r1"), stages))}  # rank 0 on B, rank 1 on A
    for client, site in zip((b, a), by_site(pools)):
        await register_site(client, "dd0", site)
    src_blocks, dst_blocks = [3, 7, 50], [1, 2, 60]
    handle = await a.create_lease("one0", src_blocks, num_tokens=40)

    copies = reshard_copies(sites_from_handle(handle), src_blocks, pools, dst_blocks)
    parts = site_pulls(handle, copies, b, {"dd0.r1": a})
    assert [(p.kv, [c.dst_pool for c in p.copies], p.share) for p in parts] == [(b, ["dd0"], 2), (a, ["dd0.r1"], 2)]
    first = await parts[0].kv.pull_ranges(parts[0].source, parts[0].copies, checksum=True, timeout_s=20,
                                          share=parts[0].share)
    assert await _live_leases(a) == [1]  # half of the lease's one pull: it holds for the other half
    second = await parts[1].kv.pull_ranges(parts[1].source, parts[1].copies, checksum=True, timeout_s=20,
                                           share=parts[1].share)

    assert (first.path, second.path) == ("cross-host", "same-host")
    for layer, stage in enumerate(stages):
        assert torch.equal(stage.tensor[dst_blocks], src.tensor[src_blocks][:, layer:layer + 1])
    assert await _live_leases(a, b) == [0, 0]


async def test_a_source_site_holding_only_replicas_read_elsewhere_has_its_lease_ended_at_once(
        start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    replicas = [make_pool("rp0"), make_pool("rp0.r1")]  # every layer and head, as TP ranks of a one-KV-head model
    pools = {pid: replace(p.site, kvxfer=host_b.address if r else "")
             for r, (pid, p) in enumerate(zip(("rp0", "rp0.r1"), replicas))}
    for client, site in zip((a, b), by_site(pools)):
        await register_site(client, "rp0", site)
    dst = make_pool("dr0", fill=False)
    await a.register_pool("dr0", dst.site)
    blocks = [4, 5]
    handle = await a.create_lease("rp0", blocks, num_tokens=20)
    handle.shards.extend(shards_to_pb(pools))
    with_site_leases(handle, {host_b.address: await b.create_lease("rp0.r1", blocks, num_tokens=20)})

    copies = reshard_copies(sites_from_handle(handle), blocks, {"dr0": dst.site}, blocks)
    parts = site_pulls(handle, copies, a, {})
    assert [(p.source.kvxfer_address, len(p.copies)) for p in parts] == [(host_a.address, 1), (host_b.address, 0)]
    results = await asyncio.gather(*(p.kv.pull_ranges(p.source, p.copies, timeout_s=20, share=p.share)
                                     for p in parts))

    assert [r.nbytes for r in results] == [len(blocks) * LAYOUT.block_bytes, 0]
    assert torch.equal(dst.tensor[blocks], replicas[0].tensor[blocks])
    assert await _live_leases(a, b) == [0, 0]  # B's lease ended by its empty pull, not at expiry
