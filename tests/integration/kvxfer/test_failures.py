"""Leases expire and free their blocks; a dead or stalled source fails the pull in bounded time."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import pytest

from services.common.kv_layout import KVLayout
from services.kvxfer.client import PullFailed
from services.kvxfer.lease_keeper import LeaseKeeper
from services.kvxfer.leases import LeaseState
from tests.integration.kvxfer.conftest import LAYOUT, block_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
BIG = KVLayout(num_blocks=256, num_layers=8, block_size=16, num_kv_heads=8, head_dim=128)  # 1 MB blocks


async def test_expired_lease_frees_its_blocks_and_cannot_be_pulled(start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    await a.register_pool("p0", make_pool("p0").site)
    await a.register_pool("d0", make_pool("d0", fill=False).site)
    await b.register_pool("d1", make_pool("d1", fill=False).site)
    freed: list[list[int]] = []
    keeper = LeaseKeeper(a, "p0", freed.append)
    watching = asyncio.create_task(keeper.run())
    try:
        handle = await keeper.create_lease([5, 6, 7], num_tokens=40, ttl_s=0.3)
        deadline = time.monotonic() + 5
        while not freed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert freed == [[5, 6, 7]] and keeper.held() == 0
    finally:
        watching.cancel()
    for client, dst in ((a, "d0"), (b, "d1")):  # same host, then across hosts
        with pytest.raises(PullFailed) as failed:
            await client.pull(handle, dst, [1, 2, 3], timeout_s=5)
        assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION and "expired" in str(failed.value)
    stats = await a.stats()
    assert (stats.leases_expired, stats.live_leases) == (1, 0)


async def test_released_lease_is_freed_and_cannot_be_pulled(start_kvxfer, make_pool, clients) -> None:
    host = await start_kvxfer()
    client = clients(host.address)
    await client.register_pool("p0", make_pool("p0").site)
    await client.register_pool("d0", make_pool("d0", fill=False).site)
    events = client.watch_leases("p0")
    handle = await client.create_lease("p0", [9], num_tokens=3)
    assert await client.release(handle.lease_id)
    end = await asyncio.wait_for(anext(events), 5)
    assert (end.block_ids, end.state) == ([9], LeaseState.RELEASED)
    assert not await client.release(handle.lease_id)
    with pytest.raises(PullFailed, match="released"):
        await client.pull(handle, "d0", [0])


async def _wait_in_flight(client, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (await client.stats()).pulls_in_flight == 0:
        assert time.monotonic() < deadline, "pull never started"
        await asyncio.sleep(0.005)


async def test_killing_the_source_mid_pull_fails_it_as_unavailable_well_before_the_timeout(start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer("--pull-timeout-s", "10")
    a, b = clients(host_a.address), clients(host_b.address)
    src = make_pool("p0", BIG)
    await a.register_pool("p0", src.site)
    await b.register_pool("d0", make_pool("d0", BIG, fill=False).site)
    warm = await a.create_lease("p0", [0], num_tokens=16)
    await b.pull(warm, "d0", [0])  # connected: the pull below is killed while its bytes flow
    blocks = list(range(1, 256))
    handle = await a.create_lease("p0", blocks, num_tokens=4096)
    freed: list[list[int]] = []

    pull = asyncio.create_task(b.pull(handle, "d0", blocks[::-1], timeout_s=10, on_failure=freed.append))
    await _wait_in_flight(b)
    await asyncio.sleep(0.03)
    host_a.kill()
    start = time.monotonic()
    with pytest.raises(PullFailed) as failed:
        await pull
    elapsed = time.monotonic() - start
    # A dead peer is detected by its closed connection, not by waiting out the pull's 10 s timeout.
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE, (failed.value.code, str(failed.value), elapsed)
    assert elapsed < 3, elapsed
    assert freed == [blocks[::-1]]
    stats = await b.stats()
    assert (stats.pulls_in_flight, stats.pulls_failed, stats.pulls_ok, stats.pools) == (0, 1, 1, 1)


async def test_stalled_source_times_out_and_the_retry_succeeds(start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    await a.register_pool("p0", src.site)
    await b.register_pool("d0", dst.site)
    warm = await a.create_lease("p0", [0], num_tokens=16)
    await b.pull(warm, "d0", [0])  # the destination now knows the source's UCX address
    blocks = list(range(1, 64))
    handle = await a.create_lease("p0", blocks, num_tokens=1000, ttl_s=60)

    os.kill(host_a.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(PullFailed) as failed:
            await b.pull(handle, "d0", blocks, timeout_s=1.5)
        assert failed.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - start < 4
    finally:
        os.kill(host_a.proc.pid, signal.SIGCONT)

    result = await b.pull(handle, "d0", blocks, checksum=True, timeout_s=20)  # the lease survived the failure
    assert result.nbytes == len(blocks) * LAYOUT.block_bytes
    assert block_bytes(dst, blocks) == block_bytes(src, blocks)


async def test_killing_the_destination_mid_pull_leaves_the_lease_pullable(start_kvxfer, make_pool, clients) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = clients(host_a.address), clients(host_b.address)
    src = make_pool("p0", BIG)
    await a.register_pool("p0", src.site)
    await a.register_pool("d0", make_pool("d0", BIG, fill=False).site)
    await b.register_pool("d1", make_pool("d1", BIG, fill=False).site)
    warm = await a.create_lease("p0", [0], num_tokens=16)
    await b.pull(warm, "d1", [0])
    blocks = list(range(1, 256))
    handle = await a.create_lease("p0", blocks, num_tokens=4096, ttl_s=60)

    pull = asyncio.create_task(b.pull(handle, "d1", blocks, timeout_s=10))
    await _wait_in_flight(b)
    await asyncio.sleep(0.03)
    host_b.kill()
    with pytest.raises(PullFailed):
        await pull

    result = await a.pull(handle, "d0", blocks, checksum=True)  # the lease survived the failed pull
    assert result.nbytes == len(blocks) * BIG.block_bytes
    async with asyncio.timeout(5):  # it ends only once the dead pull's pin is gone too: nothing leaked
        while (await a.stats()).live_leases:
            await asyncio.sleep(0.01)
