"""The pool in /dev/shm: another mapping sees the K/V the engine wrote, one block is one contiguous range."""

from __future__ import annotations

import os

import torch

from services.common.kv_layout import KVLayout
from services.common.pool_files import map_pool_file, shm_path
from services.common.sampling import SamplingParams


def test_shared_pool_is_visible_to_a_mapper(make_engine) -> None:
    path = shm_path("test")
    engine = make_engine(policy="prefill", num_blocks=8, block_size=4, pool_path=path)
    engine.add_request("r", [1, *range(70, 79)], SamplingParams(max_tokens=4, ignore_eos=True))
    (out,) = engine.step()
    assert out.prefilled
    blocks = engine.prefilled["r"].block_ids
    mapped = torch.from_numpy(map_pool_file(path, engine.layout.pool_bytes)).view(torch.float32).view(engine.layout.shape)
    assert mapped[blocks].abs().sum() > 0
    assert torch.equal(mapped, engine.runner.pool.tensor)
    # block b of the layout is bytes [b * block_bytes, (b + 1) * block_bytes) of the file
    raw = torch.from_file(path, shared=False, size=engine.layout.pool_bytes // 4, dtype=torch.float32)
    b, n = blocks[0], engine.layout.block_bytes // 4
    assert torch.equal(raw[b * n : (b + 1) * n], engine.runner.pool.tensor[b].flatten())
    engine.close()
    assert not os.path.exists(path)


def test_layout_sizes() -> None:
    layout = KVLayout(num_blocks=10, num_layers=3, block_size=16, num_kv_heads=2, head_dim=8, dtype="float16")
    assert layout.shape == (10, 3, 2, 2, 16, 8)
    assert layout.block_bytes == 3 * 2 * 16 * 2 * 8 * 2
    assert layout.pool_bytes == 10 * layout.block_bytes
