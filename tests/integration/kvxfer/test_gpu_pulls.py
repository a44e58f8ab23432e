"""The GPU path: pools in device memory shared with kvxfer by CUDA IPC, copied on the device inside a host and
sent from device memory over UCX across hosts; pulls between a GPU pool and a host pool either way; re-sharding
pulls between GPU pools. Byte-exact, random blocks, CRC32 checked. Runs only where torch sees a GPU and cupy imports (scripts/gpu_check.sh)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from services.common.kv_layout import HEAD_AXIS, KVLayout
from services.common.pool_site import PoolSite
from services.common.span import Span
from services.decode.reshard import reshard_copies
from services.engine.kv_pool import KVPool
from tests.integration.kvxfer.conftest import LAYOUT

pytest.importorskip("cupy", reason="the GPU path needs cupy (the gpu extra)")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")]
PAIRS = [("cuda", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")]


@pytest.fixture
def pool_on(make_pool) -> Iterator:
    """pool_on(instance_id, "cuda" | "cpu"): a pool of LAYOUT filled with random values (empty if fill=False)."""
    def make(instance_id: str, device: str, fill: bool = True):
        if device == "cpu":
            return make_pool(instance_id, fill=fill)
        pool = KVPool(LAYOUT, torch.device("cuda:0"))
        if fill:
            pool.tensor.copy_(torch.randn(LAYOUT.shape))
        return pool

    yield make


def _bytes(pool, block_ids: list[int]) -> list[bytes]:
    return [pool.tensor[b].cpu().numpy().tobytes() for b in block_ids]


def _jobs(seed: int) -> list[tuple[list[int], list[int]]]:
    """(source, destination) block lists: random scattered blocks, one contiguous run, every block of the pool."""
    rng = random.Random(seed)
    every = list(range(LAYOUT.num_blocks))
    return [(rng.sample(every, 12), rng.sample(every, 12)), (list(range(8, 24)), list(range(30, 46))),
            (every, rng.sample(every, len(every)))]


async def _pull_each(source, puller, src, dst, seed: int, path: str) -> None:
    """Lease every job's blocks of p0 at source, pull them into d0 through puller, compare the bytes."""
    for src_blocks, dst_blocks in _jobs(seed):
        handle = await source.create_lease("p0", src_blocks, num_tokens=len(src_blocks) * LAYOUT.block_size)
        result = await puller.pull(handle, "d0", dst_blocks, checksum=True, timeout_s=30)
        assert (result.nbytes, result.path) == (len(src_blocks) * LAYOUT.block_bytes, path)
        assert _bytes(dst, dst_blocks) == _bytes(src, src_blocks)
    assert (await puller.stats()).pulls_ok == len(_jobs(seed))


@pytest.mark.parametrize(("src_device", "dst_device"), PAIRS)
async def test_same_host_pulls_are_byte_exact(start_kvxfer, clients, pool_on, src_device, dst_device) -> None:
    client = clients((await start_kvxfer()).address)
    src, dst = pool_on("p0", src_device), pool_on("d0", dst_device, fill=False)
    await client.register_pool("p0", src.site)
    await client.register_pool("d0", dst.site)
    await _pull_each(client, client, src, dst, 3, "same-host")


@pytest.mark.parametrize(("src_device", "dst_device"), PAIRS)
async def test_cross_host_pulls_are_byte_exact(start_kvxfer, clients, pool_on, src_device, dst_device) -> None:
    a, b = clients((await start_kvxfer()).address), clients((await start_kvxfer()).address)
    src, dst = pool_on("p0", src_device), pool_on("d0", dst_device, fill=False)
    await a.register_pool("p0", src.site)
    await b.register_pool("d0", dst.site)
    await _pull_each(a, b, src, dst, 5, "cross-host")


@pytest.mark.parametrize("hosts", ["same-host", "cross-host"])
async def test_resharding_pulls_between_gpu_pools_are_byte_exact(start_kvxfer, clients, hosts) -> None:
    """A TP 2 prefill's two rank pools (one KV head each) into one decode pool holding both heads, all on the GPU:
    one kernel launch per pool pair on one host, frames packed and unpacked on the device across hosts."""
    half = KVLayout(LAYOUT.num_blocks, LAYOUT.num_layers, LAYOUT.block_size, 1, LAYOUT.head_dim)
    source = clients((await start_kvxfer()).address)
    puller = source if hosts == "same-host" else clients((await start_kvxfer()).address)
    ranks = [KVPool(half, torch.device("cuda:0")) for _ in range(2)]
    for pool in ranks:
        pool.tensor.copy_(torch.randn(half.shape))
    dst = KVPool(LAYOUT, torch.device("cuda:0"))
    await source.register_pool("p0", ranks[0].site)
    await source.register_pool("p0.r1", ranks[1].site, owner="p0")
    await puller.register_pool("d0", dst.site)
    src_blocks, dst_blocks = [5, 6, 7, 40, 2], [9, 10, 30, 31, 0]
    shards = {"p0": PoolSite(half, Span(0, LAYOUT.num_layers), Span(0, 1)),
              "p0.r1": PoolSite(half, Span(0, LAYOUT.num_layers), Span(1, 1))}
    copies = reshard_copies(shards, src_blocks, {"d0": PoolSite(LAYOUT, Span(0, LAYOUT.num_layers), Span(0, 2))},
                            dst_blocks)
    handle = await source.create_lease("p0", src_blocks, num_tokens=len(src_blocks) * LAYOUT.block_size)

    result = await puller.pull_ranges(handle, copies, checksum=True, timeout_s=30)

    assert (result.nbytes, result.path) == (len(src_blocks) * LAYOUT.block_bytes, hosts)
    want = torch.cat([ranks[0].tensor[src_blocks], ranks[1].tensor[src_blocks]], dim=HEAD_AXIS)
    assert torch.equal(dst.tensor[dst_blocks], want)
