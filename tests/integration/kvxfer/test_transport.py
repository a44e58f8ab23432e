"""The UCX transport in one process (source and destination over loopback): the ack goes after the
pull has returned, and releases the lease; a failed verify keeps it; idle endpoints cost no CPU; a
frame sent as a scatter-gather message is received packed and the reverse, with several frames in one batch;
aborting an endpoint withdraws its scatter-gather receives; with sealing on, pulls are byte-exact and a chunk
altered on its way fails its pull without writing its blocks."""

from __future__ import annotations

import asyncio
import random
import time

import numpy as np
import pytest

from services.common.cbuild import why_not_buildable
from services.common.kv_layout import KVLayout
from services.kvxfer.config import KVXferConfig
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.orders import PullOrder, SourceGrant
from services.kvxfer.pools import MappedPool
from services.kvxfer.ranges import block_ranges
from services.kvxfer.ucx.env import apply_ucx_env

pytestmark = pytest.mark.timeout(60)
LAYOUT = KVLayout(num_blocks=16, num_layers=4, block_size=16, num_kv_heads=2, head_dim=64)  # 64 KB blocks


class Source:
    """A PullSource over one pool that records how each pull ended."""

    def __init__(self, pool: MappedPool) -> None:
        self.pool = pool
        self.closed: list[bool] = []

    async def open_pull(self, order: PullOrder) -> SourceGrant:
        return SourceGrant([self.pool.ranges(block_ranges(order.src_blocks, order.dst_blocks, order.block_bytes),
                                             "src")], None)

    def close_pull(self, order: PullOrder, ok: bool) -> None:
        self.closed.append(ok)


async def _until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def test_ack_follows_the_pull_and_a_failed_verify_keeps_the_lease(monkeypatch) -> None:
    apply_ucx_env(KVXferConfig())
    from services.kvxfer.ucx import frames, transport  # after the UCX environment is set
    from services.kvxfer.ucx.iov import helper
    from services.kvxfer.ucx.loop import UcxLoop
    from services.kvxfer.ucx.transport import UcxPuller, UcxServer

    ucx = UcxLoop()  # one per process: this is the only test that runs UCX in the pytest process
    rng = np.random.default_rng(0)
    src = MappedPool("p0", LAYOUT, "cpu", rng.integers(0, 256, LAYOUT.pool_bytes, dtype=np.uint8))
    dst = MappedPool("d0", LAYOUT, "cpu", np.zeros(LAYOUT.pool_bytes, dtype=np.uint8))
    source = Source(src)
    server, puller = UcxServer(ucx, source), UcxPuller(ucx, connect_timeout_s=5.0)
    peer = ("127.0.0.1", server.start(0))

    async def verified(crc: int | None) -> None:
        pass

    async def corrupt(crc: int | None) -> None:
        raise XferError(Failure.DATA_LOSS, "checksum mismatch")

    def order(src_blocks: list[int], dst_blocks: list[int]) -> tuple[PullOrder, list]:
        ranges = block_ranges(src_blocks, dst_blocks, LAYOUT.block_bytes)
        return (PullOrder("lease", "p0", src_blocks, dst_blocks, LAYOUT.block_bytes, False, True),
                [dst.ranges(ranges, "dst")])

    try:
        await puller.pull(peer, *order([3, 9, 4], [0, 5, 1]), verified)
        assert source.closed == []  # the pull returned before its ack was even sent
        await _until(lambda: source.closed == [True])
        block = LAYOUT.block_bytes
        for s, d in ((3, 0), (9, 5), (4, 1)):
            assert np.array_equal(dst.data[d * block:(d + 1) * block], src.data[s * block:(s + 1) * block])

        with pytest.raises(XferError, match="checksum mismatch"):
            await puller.pull(peer, *order([7], [2]), corrupt)
        await _until(lambda: source.closed == [True, False])  # the lease is kept
        await puller.pull(peer, *order([8], [3]), verified)  # the endpoint stays in step after a nack
        await _until(lambda: source.closed == [True, False, True])

        cpu = time.process_time()
        await asyncio.sleep(0.5)  # an idle endpoint waits for its next order in epoll, not polling
        assert time.process_time() - cpu < 0.05

        built = helper() is not None
        assert built or why_not_buildable() is not None, "the scatter-gather helper did not build"
        rng = random.Random(0)
        # frames of up to 3 blocks, runs of 2 sent alone: several scatter-gather messages in one batch between
        # single ranges (these blocks make ranges of 1, 1, 1, 2, 1, 1, 1, 1 blocks: frames 3, run, 3, 1)
        monkeypatch.setattr(frames, "FRAME_BYTES", 3 * block)
        monkeypatch.setattr(frames, "DIRECT_BYTES", 2 * block)
        mixed = ([0, 2, 4, 6, 7, 9, 11, 13, 15], [15, 13, 11, 8, 9, 5, 3, 1, 0])
        for sides in ({"src"}, {"dst"}, {"src", "dst"}, set()) if built else (set(),):  # sides that scatter-gather
            monkeypatch.setattr(transport, "_scatter_gather",
                                lambda ranges, sides=sides: ("src" if ranges.pool is src else "dst") in sides)
            drawn = rng.sample(range(LAYOUT.num_blocks), 9), rng.sample(range(LAYOUT.num_blocks), 9)
            for src_blocks, dst_blocks in (drawn, mixed):
                dst.data[:] = 0
                await puller.pull(peer, *order(src_blocks, dst_blocks), verified)
                for s, d in zip(src_blocks, dst_blocks):
                    assert np.array_equal(dst.data[d * block:(d + 1) * block],
                                          src.data[s * block:(s + 1) * block]), sides

        await _encrypted_pulls_are_exact_and_a_tampered_chunk_fails_its_pull(ucx, src, dst, order, verified, monkeypatch)
        if built:
            await _abort_withdraws_scatter_gather_receives(ucx, peer, dst)
    finally:
        puller.close()
        server.close()
        await asyncio.sleep(0.05)  # the source's endpoint task sees the abort and ends
        ucx.close()


async def _encrypted_pulls_are_exact_and_a_tampered_chunk_fails_its_pull(ucx, src: MappedPool, dst: MappedPool, order,
                                                                        verified, monkeypatch) -> None:
    """With sealing on both sides a pull is byte-exact; a chunk altered on its way fails the pull (DATA_LOSS), its
    blocks are not written, the source keeps the lease, and the next pull goes through."""
    from services.kvxfer.ucx.sealing import ChunkCodec, Sealer, kv_key
    from services.kvxfer.ucx.transport import FRAME_TAG, UcxPuller, UcxServer

    source = Source(src)  # its own: acks of the caller's last pulls may still arrive at the other
    sealing, opening = Sealer(kv_key(b"s" * 32)), Sealer(kv_key(b"s" * 32))
    server, puller = UcxServer(ucx, source, sealer=sealing), UcxPuller(ucx, 5.0, sealer=opening)
    peer = ("127.0.0.1", server.start(0))
    block = LAYOUT.block_bytes
    # single-block ranges; frames of 3 blocks (FRAME_BYTES as the caller set it): chunks FRAME_TAG and FRAME_TAG + 1
    src_blocks, dst_blocks = [1, 3, 5, 7, 9, 11], [0, 2, 4, 6, 8, 10]
    seal = ChunkCodec.seal

    def on_the_wire(codec, pull_id: bytes, index: int, clear: np.ndarray, out: np.ndarray) -> None:
        seal(codec, pull_id, index, clear, out)
        if index == FRAME_TAG + 1:
            out[len(out) // 2] ^= 0x01

    try:
        cases = (False, True, False)  # tampered?
        for i, tampered in enumerate(cases):
            monkeypatch.setattr(ChunkCodec, "seal", on_the_wire if tampered else seal)
            dst.data[:] = 0
            ended = [not t for t in cases[:i + 1]]  # how the source closed each pull: ok, or the lease kept
            pulled = puller.pull(peer, *order(src_blocks, dst_blocks), verified)
            if not tampered:
                await pulled
                await _until(lambda ended=ended: source.closed == ended)
                for s, d in zip(src_blocks, dst_blocks):
                    assert np.array_equal(dst.data[d * block:(d + 1) * block], src.data[s * block:(s + 1) * block])
                continue
            with pytest.raises(XferError, match="failed authentication") as failed:
                await pulled
            assert failed.value.failure is Failure.DATA_LOSS
            assert not any(dst.data[d * block:(d + 1) * block].any() for d in dst_blocks[3:])  # the altered chunk's
            await _until(lambda ended=ended: source.closed == ended)  # the lease is kept
    finally:
        monkeypatch.setattr(ChunkCodec, "seal", seal)
        puller.close()
        server.close()
        sealing.close()
        opening.close()


async def _abort_withdraws_scatter_gather_receives(ucx, peer: tuple[str, int], dst: MappedPool) -> None:
    """Batches of receives posted into the pool, and of sends no one receives, end (failed) once their endpoint
    is aborted: nothing writes into or reads from the pool later."""
    ep = await ucx.connect(*peer, 5.0)
    block = LAYOUT.block_bytes
    received = ucx.recv_iov(ep, [99, 100], dst.data, [2, 1], [0, 2 * block, 4 * block], [block] * 3)
    blocks = range(4, 12)  # 512 KB: over UCX_RNDV_THRESH, so it waits for a receive the peer never posts
    sent = ucx.send_iov(ep, [98, 101], dst.data, [4, 4], [b * block for b in blocks], [block] * len(blocks))
    await asyncio.sleep(0.05)
    assert not received.done() and not sent.done()
    ucx.abort(ep)
    async with asyncio.timeout(5.0):
        for transfer in (received, sent):
            with pytest.raises(Exception, match="scatter-gather message failed"):
                await transfer
