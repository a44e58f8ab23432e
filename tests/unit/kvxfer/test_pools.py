"""Host copies by address move exactly the ranges' bytes: pool to pool (by ranges, and by block ids), and packed
through a frame; with the C copy loops and with their fallback (no C compiler)."""

import numpy as np
import pytest

from services.common.cbuild import why_not_buildable
from services.common.kv_layout import KVLayout
from services.kvxfer import pools
from services.kvxfer.pools import MappedPool, copy_blocks, copy_ranges
from services.kvxfer.ranges import block_ranges

LAYOUT = KVLayout(num_blocks=16, num_layers=1, block_size=2, num_kv_heads=1, head_dim=4)  # 64-byte blocks
SRC, DST = [3, 4, 9, 0, 15], [7, 8, 1, 2, 10]


def _pool(name: str, rng: np.random.Generator | None = None) -> MappedPool:
    data = rng.integers(0, 256, LAYOUT.pool_bytes, dtype=np.uint8) if rng else np.zeros(LAYOUT.pool_bytes, np.uint8)
    return MappedPool(name, LAYOUT, "cpu", data)


def _blocks(pool: MappedPool, ids: list[int]) -> list[bytes]:
    return [pool.data.reshape(LAYOUT.num_blocks, -1)[b].tobytes() for b in ids]


@pytest.fixture(params=["C loop", "memmove per range"], autouse=True)
def copier(request, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "C loop":
        if (unbuildable := why_not_buildable()) is not None:
            pytest.skip(unbuildable)
        assert pools.copy_kernel() is not None and pools.blocks_kernel() is not None, "copy_ranges.c did not build"
        monkeypatch.setattr(pools, "KERNEL_FROM_RANGES", 1)  # these few ranges too
    else:
        monkeypatch.setattr(pools, "copy_kernel", lambda: None)
        monkeypatch.setattr(pools, "blocks_kernel", lambda: None)


def test_copy_ranges_moves_each_block_to_its_pair_and_nothing_else() -> None:
    src, dst = _pool("src", np.random.default_rng(0)), _pool("dst")
    copy_ranges(src, dst, block_ranges(SRC, DST, LAYOUT.block_bytes))
    assert _blocks(dst, DST) == _blocks(src, SRC)
    untouched = sorted(set(range(LAYOUT.num_blocks)) - set(DST))
    assert not dst.data.reshape(LAYOUT.num_blocks, -1)[untouched].any()


def test_copy_blocks_moves_each_block_to_its_pair_and_nothing_else() -> None:
    src, dst = _pool("src", np.random.default_rng(2)), _pool("dst")
    copy_blocks(src, dst, SRC, DST)  # 3, 4 -> 7, 8 is one run
    assert _blocks(dst, DST) == _blocks(src, SRC)
    untouched = sorted(set(range(LAYOUT.num_blocks)) - set(DST))
    assert not dst.data.reshape(LAYOUT.num_blocks, -1)[untouched].any()


def test_pack_then_unpack_is_a_copy() -> None:
    src, dst = _pool("src", np.random.default_rng(1)), _pool("dst")
    ranges = block_ranges(SRC, DST, LAYOUT.block_bytes)
    buf = np.zeros(ranges.nbytes + 7, dtype=np.uint8)
    src.ranges(ranges, "src").pack(1, len(ranges) - 1, buf)  # every range but the first
    dst.ranges(ranges, "dst").unpack(1, len(ranges) - 1, buf)
    assert _blocks(dst, DST[2:]) == _blocks(src, SRC[2:])  # the first range is blocks 3, 4 -> 7, 8
    assert not dst.data.reshape(LAYOUT.num_blocks, -1)[DST[:2]].any()
