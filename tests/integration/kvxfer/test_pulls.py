"""Pulls are byte-exact on the same host and across hosts (two kvxfer processes over UCX)."""

from __future__ import annotations

import asyncio
import random
import urllib.request

import grpc
import pytest

from services.common.net import free_port
from services.kvxfer.client import PullFailed
from services.kvxfer.leases import LeaseState
from tests.integration.kvxfer.conftest import LAYOUT, block_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


async def test_same_host_pull_is_byte_exact_and_releases_the_lease(start_kvxfer, make_pool, clients) -> None:
    metrics_port = free_port()
    host = await start_kvxfer("--metrics-port", str(metrics_port))
    client = clients(host.address)
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    await client.register_pool("p0", src.site)
    await client.register_pool("d0", dst.site)
    events = client.watch_leases("p0")
    rng = random.Random(1)
    src_blocks, dst_blocks = rng.sample(range(64), 12), rng.sample(range(64), 12)

    handle = await client.create_lease("p0", src_blocks, num_tokens=190, ttl_s=30)
    result = await client.pull(handle, "d0", dst_blocks, checksum=True)

    assert (result.nbytes, result.path) == (12 * LAYOUT.block_bytes, "same-host")
    assert block_bytes(dst, dst_blocks) == block_bytes(src, src_blocks)
    end = await asyncio.wait_for(anext(events), 5)
    assert (end.lease_id, end.block_ids, end.state) == (handle.lease_id, src_blocks, LeaseState.RELEASED)
    with pytest.raises(PullFailed) as failed:
        await client.pull(handle, "d0", dst_blocks)
    assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION and "released" in str(failed.value)
    stats = await client.stats()
    assert (stats.pulls_ok, stats.pulls_failed, stats.live_leases) == (1, 1, 0)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    assert f'distserve_kvxfer_pulled_bytes_total{{path="same-host"}} {12 * LAYOUT.block_bytes}.0' in metrics
    assert 'distserve_kvxfer_pulls_failed_total{reason="lease_gone"} 1.0' in metrics
    for name in ("distserve_kvxfer_pull_seconds_bucket", "distserve_kvxfer_pull_gbps_bucket",
                 "distserve_kvxfer_leases_expired_total 0.0", "distserve_kvxfer_live_leases 0.0"):
        assert name in metrics


async def test_cross_host_concurrent_pulls_of_random_blocks_are_byte_exact(start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    sources = [make_pool(f"p{i}") for i in range(2)]
    for i, pool in enumerate(sources):
        await a.register_pool(f"p{i}", pool.site)
    dst = make_pool("d0", fill=False)
    await b.register_pool("d0", dst.site)
    rng = random.Random(7)
    free_dst = list(range(64))
    rng.shuffle(free_dst)
    jobs = []
    for k in range(8):  # 8 requests of 1..8 blocks: destination blocks are disjoint
        n = rng.randint(1, 8)
        src_id = k % 2
        src_blocks, dst_blocks = rng.sample(range(64), n), [free_dst.pop() for _ in range(n)]
        handle = await a.create_lease(f"p{src_id}", src_blocks, num_tokens=n * 16)
        jobs.append((src_id, src_blocks, dst_blocks, handle))

    results = await asyncio.gather(*(b.pull(h, "d0", d, checksum=k % 2 == 0, timeout_s=20)
                                     for k, (_, _, d, h) in enumerate(jobs)))

    assert {r.path for r in results} == {"cross-host"}
    for (src_id, src_blocks, dst_blocks, _), result in zip(jobs, results):
        assert result.nbytes == len(src_blocks) * LAYOUT.block_bytes
        assert block_bytes(dst, dst_blocks) == block_bytes(sources[src_id], src_blocks)
    async with asyncio.timeout(5):  # the ack that releases a lease at the source is not waited for
        while (await a.stats()).live_leases:
            await asyncio.sleep(0.01)
    assert (await b.stats()).pulls_ok == len(jobs)


async def test_bad_destination_fails_without_touching_the_lease(start_kvxfer, make_pool, clients) -> None:
    host = await start_kvxfer()
    client = clients(host.address)
    await client.register_pool("p0", make_pool("p0").site)
    handle = await client.create_lease("p0", [1, 2], num_tokens=20)
    freed: list[list[int]] = []
    with pytest.raises(PullFailed) as failed:
        await client.pull(handle, "nobody", [3, 4], on_failure=freed.append)
    assert failed.value.code is grpc.StatusCode.INVALID_ARGUMENT and freed == [[3, 4]]
    await client.register_pool("d0", make_pool("d0", fill=False).site)
    with pytest.raises(PullFailed, match="INVALID_ARGUMENT"):
        await client.pull(handle, "d0", [3])
    assert (await client.stats()).live_leases == 1
