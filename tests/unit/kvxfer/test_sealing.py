"""A sealed KV chunk opens only as what it was: its own pull, its own position, every byte as sealed; a frame
sealed from one pool's ranges lands byte-exact in another's, and one that fails to open leaves the pool as it was;
long ranges are cut into chunks that hold the same bytes in the same order."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.kv_layout import KVLayout
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.pools import MappedPool, PoolRanges
from services.kvxfer.ranges import block_ranges
from services.kvxfer.ucx.frames import plan_frames
from services.kvxfer.ucx.sealing import NONCE_BYTES, OVERHEAD, ChunkCodec, Sealer, chunked, kv_key

SECRET = b"0123456789abcdef" * 4
PULL = b"9f" * 16
LAYOUT = KVLayout(num_blocks=8, num_layers=2, block_size=4, num_kv_heads=2, head_dim=32)


def _sealed(codec: ChunkCodec, clear: np.ndarray, index: int = 3) -> np.ndarray:
    out = np.empty(len(clear) + OVERHEAD, np.uint8)
    codec.seal(PULL, index, clear, out)
    return out


def test_a_chunk_opens_to_its_clear_bytes_which_are_not_on_the_wire() -> None:
    codec = ChunkCodec(kv_key(SECRET))
    clear = np.frombuffer(b"KV-PATTERN-" * 1000, np.uint8)
    sealed = _sealed(codec, clear)
    assert b"KV-PATTERN-" not in sealed.tobytes()
    out = np.empty_like(clear)
    codec.open(PULL, 3, sealed, out)
    assert np.array_equal(out, clear)
    assert not np.array_equal(_sealed(codec, clear), sealed)  # a fresh nonce each time


@pytest.mark.parametrize("where", [0, NONCE_BYTES, NONCE_BYTES + 500, -1])  # nonce, ciphertext, tag
def test_a_chunk_altered_anywhere_fails_to_open(where: int) -> None:
    codec = ChunkCodec(kv_key(SECRET))
    sealed = _sealed(codec, np.arange(4096, dtype=np.uint8))
    sealed[where] ^= 0x01
    with pytest.raises(XferError) as failed:
        codec.open(PULL, 3, sealed, np.empty(4096, np.uint8))
    assert failed.value.failure is Failure.DATA_LOSS and "chunk 3" in str(failed.value)


@pytest.mark.parametrize(("pull_id", "index", "secret"), [
    (b"a0" * 16, 3, SECRET),  # replayed from another pull
    (PULL, 4, SECRET),  # moved to another position
    (PULL, 3, b"another deployment's secret....." * 2),  # sealed under another deployment's key
])
def test_a_chunk_opens_only_as_its_own_pull_position_and_deployment(pull_id: bytes, index: int,
                                                                    secret: bytes) -> None:
    sealed = _sealed(ChunkCodec(kv_key(SECRET)), np.arange(256, dtype=np.uint8))
    with pytest.raises(XferError, match="failed authentication"):
        ChunkCodec(kv_key(secret)).open(pull_id, index, sealed, np.empty(256, np.uint8))


def _pool(name: str, fill: int | None) -> MappedPool:
    data = np.zeros(LAYOUT.pool_bytes, np.uint8) if fill is None else \
        np.random.default_rng(fill).integers(0, 256, LAYOUT.pool_bytes, dtype=np.uint8)
    return MappedPool(name, LAYOUT, "cpu", data)


async def test_frames_sealed_from_one_pool_open_byte_exact_into_another_and_a_bad_one_writes_nothing() -> None:
    src, dst = _pool("p0", fill=1), _pool("d0", fill=None)
    ranges = block_ranges([5, 1, 2, 7], [0, 3, 4, 6], LAYOUT.block_bytes)
    src_ranges, dst_ranges = src.ranges(ranges, "src"), dst.ranges(ranges, "dst")
    [frame] = plan_frames(src_ranges.lengths, pack=True)
    sealer = Sealer(kv_key(SECRET))
    wire: list[np.ndarray] = []

    async def send(buf: np.ndarray) -> None:
        wire.append(buf.copy())

    def receive(chunk: np.ndarray):
        async def recv(buf: np.ndarray) -> None:
            buf[:] = chunk
        return recv

    try:
        await sealer.send(send, src_ranges, frame, PULL, 2)
        assert len(wire[0]) == frame.nbytes + OVERHEAD
        tampered = wire[0].copy()
        tampered[NONCE_BYTES + 10] ^= 0xFF
        for chunk, index in ((tampered, 2), (wire[0], 5)):
            with pytest.raises(XferError, match="failed authentication"):
                await sealer.recv(receive(chunk), dst_ranges, frame, PULL, index)
            assert not dst.data.any()
        await sealer.recv(receive(wire[0]), dst_ranges, frame, PULL, 2)
        for s, d in zip([5, 1, 2, 7], [0, 3, 4, 6]):
            b = LAYOUT.block_bytes
            assert np.array_equal(dst.data[d * b:(d + 1) * b], src.data[s * b:(s + 1) * b])
    finally:
        sealer.close()


def test_long_ranges_are_cut_into_chunks_of_the_same_bytes_in_order() -> None:
    pool = _pool("p0", fill=2)
    ranges = PoolRanges(pool, [0, 5000, 9000], [4000, 1000, 2500])
    cut = chunked(ranges, limit=1024)
    assert max(cut.lengths) <= 1024 and sum(cut.lengths) == 7500 and len(cut.lengths) == 4 + 1 + 3

    def packed(r: PoolRanges) -> bytes:
        return b"".join(pool.data[o:o + n].tobytes() for o, n in zip(r.offsets, r.lengths))
    assert packed(cut) == packed(ranges)
    assert chunked(ranges, limit=4000) is ranges  # nothing to cut
