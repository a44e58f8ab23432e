"""Re-sharding pulls (PullRanges): a TP 2 prefill's two rank pools into one decode pool, byte-exact; ranges
that read outside the lease, or pools the lease does not cover, are refused."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import torch

from services.common.kv_layout import HEAD_AXIS, KVLayout
from services.common.pool_site import PoolSite
from services.common.span import Span
from services.decode.reshard import reshard_copies
from services.kvxfer.client import PullFailed
from services.kvxfer.ranged import RangeCopy
from tests.integration.kvxfer.conftest import LAYOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

HALF = KVLayout(LAYOUT.num_blocks, LAYOUT.num_layers, LAYOUT.block_size, 1, LAYOUT.head_dim)  # one KV head of two


async def _setup(start_kvxfer, make_pool, clients):
    host = await start_kvxfer()
    client = clients(host.address)
    ranks = [make_pool("p0", HALF), make_pool("p0.r1", HALF)]
    dst = make_pool("d0", fill=False)
    await client.register_pool("p0", ranks[0].site)
    await client.register_pool("p0.r1", ranks[1].site, owner="p0")
    await client.register_pool("d0", dst.site)
    src = {"p0": PoolSite(HALF, Span(0, 2), Span(0, 1)), "p0.r1": PoolSite(HALF, Span(0, 2), Span(1, 1))}
    return client, ranks, dst, src


async def test_tp2_rank_pools_into_one_pool_are_byte_exact_and_release_the_lease(start_kvxfer, make_pool, clients) -> None:
    client, ranks, dst, src = await _setup(start_kvxfer, make_pool, clients)
    src_blocks, dst_blocks = [5, 6, 7, 40, 2], [9, 10, 30, 31, 0]
    handle = await client.create_lease("p0", src_blocks, num_tokens=70)
    copies = reshard_copies(src, src_blocks, {"d0": PoolSite(LAYOUT, Span(0, 2), Span(0, 2))}, dst_blocks)

    result = await client.pull_ranges(handle, copies, checksum=True)

    assert (result.nbytes, result.path) == (5 * LAYOUT.block_bytes, "same-host")
    want = torch.cat([ranks[0].tensor[src_blocks], ranks[1].tensor[src_blocks]], dim=HEAD_AXIS)  # heads side by side
    assert torch.equal(dst.tensor[dst_blocks], want)
    assert (await client.stats()).live_leases == 0
    with pytest.raises(PullFailed) as failed:
        await client.pull_ranges(handle, copies)
    assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION


async def test_a_run_of_leased_blocks_goes_as_one_range(start_kvxfer, make_pool, clients) -> None:
    client, ranks, _, src = await _setup(start_kvxfer, make_pool, clients)
    same = make_pool("h0", HALF, fill=False)  # rank 0's layout: whole blocks, runs merged on both sides
    await client.register_pool("h0", same.site)
    handle = await client.create_lease("p0", [5, 6, 7, 20], num_tokens=60)
    copies = reshard_copies({"p0": src["p0"]}, [5, 6, 7, 20], {"h0": PoolSite(HALF, Span(0, 2), Span(0, 1))}, [9, 10, 11, 0])
    assert [c.length.tolist() for c in copies] == [[3 * HALF.block_bytes, HALF.block_bytes]]

    await client.pull_ranges(handle, copies, checksum=True)

    assert torch.equal(same.tensor[[9, 10, 11, 0]], ranks[0].tensor[[5, 6, 7, 20]])


async def test_ranges_outside_the_lease_or_pools_it_does_not_cover_are_refused(start_kvxfer, make_pool, clients) -> None:
    client, ranks, dst, src = await _setup(start_kvxfer, make_pool, clients)
    await client.register_pool("x0", make_pool("x0", HALF).site)  # another instance's pool
    handle = await client.create_lease("p0", [3], num_tokens=16)
    one = np.array([0], np.int64)
    length = np.array([HALF.block_bytes], np.int64)
    for bad, why in [(RangeCopy("p0", "d0", one + 4 * HALF.block_bytes, one, length), "outside the leased blocks"),
                     (RangeCopy("p0", "d0", one + 3 * HALF.block_bytes + 8, one, length), "outside the leased blocks"),
                     (RangeCopy("p0", "d0", one + 3 * HALF.block_bytes, one, 2 * length), "outside the leased blocks"),
                     (RangeCopy("x0", "d0", one + 3 * HALF.block_bytes, one, length), "not covered"),
                     (RangeCopy("p0", "d0", one + 3 * HALF.block_bytes, one + LAYOUT.pool_bytes, length), "past the end")]:
        with pytest.raises(PullFailed) as failed:
            await client.pull_ranges(handle, [bad])
        assert failed.value.code is grpc.StatusCode.INVALID_ARGUMENT and why in str(failed.value)
    assert not dst.tensor.any()  # nothing written
    assert (await client.stats()).live_leases == 1  # the lease stays for a retry


async def test_cross_host_reshards_are_byte_exact_and_checked_at_the_source(start_kvxfer, make_pool, clients) -> None:
    """Over UCX between two kvxfers: a TP 2 prefill's two pools into one pool and one pool into a TP 2 decode's
    two pools equal the single-layout blocks; the source kvxfer refuses ranges outside the lease or of pools the
    lease does not cover, and keeps the lease."""
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    ranks = [make_pool("p0", HALF), make_pool("p0.r1", HALF)]
    full_src = make_pool("p1")
    await a.register_pool("p0", ranks[0].site)
    await a.register_pool("p0.r1", ranks[1].site, owner="p0")
    await a.register_pool("p1", full_src.site)
    await a.register_pool("x0", make_pool("x0", HALF).site)  # another instance's pool
    dst = make_pool("d0", fill=False)
    dst_ranks = [make_pool("d1", HALF, fill=False), make_pool("d1.r1", HALF, fill=False)]
    await b.register_pool("d0", dst.site)
    await b.register_pool("d1", dst_ranks[0].site)
    await b.register_pool("d1.r1", dst_ranks[1].site, owner="d1")
    tp2 = {"p0": PoolSite(HALF, Span(0, 2), Span(0, 1)), "p0.r1": PoolSite(HALF, Span(0, 2), Span(1, 1))}
    src_blocks, dst_blocks = [5, 6, 7, 40, 2, 63], [9, 10, 30, 31, 0, 1]

    handle = await a.create_lease("p0", src_blocks, num_tokens=90)
    copies = reshard_copies(tp2, src_blocks, {"d0": PoolSite(LAYOUT, Span(0, 2), Span(0, 2))}, dst_blocks)
    result = await b.pull_ranges(handle, copies, checksum=True, timeout_s=20)
    assert (result.nbytes, result.path) == (6 * LAYOUT.block_bytes, "cross-host")
    assert torch.equal(dst.tensor[dst_blocks], torch.cat([r.tensor[src_blocks] for r in ranks], dim=HEAD_AXIS))

    handle = await a.create_lease("p1", src_blocks, num_tokens=90)
    into = {"d1": PoolSite(HALF, Span(0, 2), Span(0, 1)), "d1.r1": PoolSite(HALF, Span(0, 2), Span(1, 1))}
    copies = reshard_copies({"p1": PoolSite(LAYOUT, Span(0, 2), Span(0, 2))}, src_blocks, into, dst_blocks)
    assert (await b.pull_ranges(handle, copies, timeout_s=20)).nbytes == 6 * LAYOUT.block_bytes
    for head, pool in enumerate(dst_ranks):
        assert torch.equal(pool.tensor[dst_blocks], full_src.tensor[src_blocks][:, :, :, head:head + 1])

    handle = await a.create_lease("p0", [3], num_tokens=16)
    one, length = np.array([0], np.int64), np.array([HALF.block_bytes], np.int64)
    for bad, why in [(RangeCopy("p0", "d1", one + 4 * HALF.block_bytes, one, length), "outside the leased blocks"),
                     (RangeCopy("x0", "d1", one + 3 * HALF.block_bytes, one, length), "not covered"),
                     (RangeCopy("p0", "d1", one + 3 * HALF.block_bytes, one + HALF.pool_bytes, length), "past the end")]:
        dst_ranks[0].tensor.zero_()
        with pytest.raises(PullFailed) as failed:
            await b.pull_ranges(handle, [bad], timeout_s=20)
        assert failed.value.code is grpc.StatusCode.INVALID_ARGUMENT and why in str(failed.value)
        assert not dst_ranks[0].tensor.any()
    async with asyncio.timeout(5):  # the two pulled leases are released at the source's ack; the refused one stays
        while (await a.stats()).live_leases != 1:
            await asyncio.sleep(0.01)
