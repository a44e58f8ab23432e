"""Re-sharding pulls: each destination rank's pool gets exactly its layers and KV heads, byte for byte."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.model_config import FULL, SLIDING, ModelConfig
from services.common.pool_site import PoolSite
from services.decode.reshard import reshard_copies
from services.engine.parallel.shard import shard_for
from services.engine.presets import PRESETS

BLOCKS, BS, D = 12, 4, 8
MODELS = {
    "gqa": ModelConfig.from_dict(PRESETS["tiny-llama"]),  # 2 layers, 4 heads, 2 KV heads
    "mha": replace(ModelConfig.from_dict(PRESETS["tiny-llama"]), num_kv_heads=4, num_layers=3),
}
LAYOUTS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1)]


def _pools(config: ModelConfig, tp: int, pp: int, name: str) -> dict[str, PoolSite]:
    shards = [shard_for(config, tp, pp, r) for r in range(tp * pp)]
    return {f"{name}{s.rank}": PoolSite(KVLayout(BLOCKS, s.layers.count, BS, s.kv_heads.count, D), s.layers, s.kv_heads)
            for s in shards}


def _slice(full: np.ndarray, site: PoolSite) -> np.ndarray:
    """A pool's part of the full KV [N, L, 2, H, bs, D]."""
    return full[:, site.layers.start:site.layers.stop, :, site.kv_heads.start:site.kv_heads.stop].copy()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("src_layout", LAYOUTS, ids=lambda t: f"src-tp{t[0]}pp{t[1]}")
@pytest.mark.parametrize("dst_layout", LAYOUTS, ids=lambda t: f"dst-tp{t[0]}pp{t[1]}")
def test_each_destination_rank_receives_exactly_its_layers_and_heads(model: str, src_layout, dst_layout) -> None:
    config = MODELS[model]
    rng = np.random.default_rng(0)
    full = rng.standard_normal((BLOCKS, config.num_layers, 2, config.num_kv_heads, BS, D)).astype(np.float32)
    src, dst = _pools(config, *src_layout, "p"), _pools(config, *dst_layout, "d")
    src_data = {pid: _slice(full, p) for pid, p in src.items()}
    dst_data = {pid: np.zeros_like(_slice(full, p)) for pid, p in dst.items()}
    src_blocks, dst_blocks = [3, 4, 5, 9, 0], [7, 8, 2, 3, 11]  # runs and jumps on both sides
    copies = reshard_copies(src, src_blocks, dst, dst_blocks)
    for c in copies:  # what kvxfer does with them
        s, d = src_data[c.src_pool].reshape(-1).view(np.uint8), dst_data[c.dst_pool].reshape(-1).view(np.uint8)
        for so, do, n in zip(c.src, c.dst, c.length):
            d[do:do + n] = s[so:so + n]
    for pid, p in dst.items():
        want = np.zeros_like(dst_data[pid])
        want[dst_blocks] = _slice(full, p)[src_blocks]
        assert np.array_equal(dst_data[pid], want), pid
    moved = sum(int(c.length.sum()) for c in copies)
    # each destination byte written once; a KV head held by several source ranks is read from one
    assert moved == len(src_blocks) * sum(p.layout.block_bytes for p in dst.values())


def test_same_layout_copies_whole_runs_of_blocks() -> None:
    config = MODELS["gqa"]
    src, dst = _pools(config, 2, 1, "p"), _pools(config, 2, 1, "d")
    copies = reshard_copies(src, [0, 1, 2, 7], dst, [4, 5, 6, 9])
    block = src["p0"].layout.block_bytes
    assert [c.length.tolist() for c in copies] == [[3 * block, block]] * 2


SLIDING_MODEL = replace(MODELS["mha"], num_layers=5, layer_types=(SLIDING, FULL, SLIDING, FULL, SLIDING),
                        sliding_window=8)


@pytest.mark.parametrize("src_layout", LAYOUTS, ids=lambda t: f"src-tp{t[0]}pp{t[1]}")
@pytest.mark.parametrize("dst_layout", LAYOUTS, ids=lambda t: f"dst-tp{t[0]}pp{t[1]}")
def test_layer_groups_reshard_each_layer_from_its_groups_blocks(src_layout, dst_layout) -> None:
    """Full layers (1, 3) in one group, sliding ones in two ((0, 2), (4,)): a block holds 2 slots of one group, and
    each group's pulled blocks carry only its layers, into the destination's slots of them."""
    config = SLIDING_MODEL
    groups = KVGroups.of_model(config, BS)
    assert [g.layers for g in groups.groups] == [(1, 3), (0, 2), (4,)]

    def pools(tp: int, pp: int, name: str) -> dict[str, PoolSite]:
        shards = [shard_for(config, tp, pp, r) for r in range(tp * pp)]
        return {f"{name}{s.rank}": PoolSite(KVLayout(BLOCKS, groups.slots(s.layers.start, s.layers.stop), BS,
                                                     s.kv_heads.count, D), s.layers, s.kv_heads)
                for s in shards}

    src, dst = pools(*src_layout, "p"), pools(*dst_layout, "d")
    pairs = [(0, 3, 7), (0, 4, 8), (1, 5, 2), (2, 9, 3), (2, 0, 11)]  # (group, source block, destination block)
    rng = np.random.default_rng(1)
    kv = {(layer, s): rng.standard_normal((2, config.num_kv_heads, BS, D)).astype(np.float32)
          for g, s, _ in pairs for layer in groups.groups[g].layers}  # each layer's K/V in its group's blocks

    def array(p: PoolSite) -> np.ndarray:
        return np.zeros((BLOCKS, p.layout.num_layers, 2, p.kv_heads.count, BS, D), np.float32)

    src_data, dst_data = {pid: array(p) for pid, p in src.items()}, {pid: array(p) for pid, p in dst.items()}
    for pid, p in src.items():
        for i, (g, slot) in enumerate(groups.placement(p.layers.start, p.layers.stop)):
            for group, s, _ in pairs:
                if group == g:
                    src_data[pid][s, slot] = kv[(p.layers.start + i, s)][:, p.kv_heads.start:p.kv_heads.stop]
    copies = reshard_copies(src, [s for _, s, _ in pairs], dst, [d for _, _, d in pairs], groups,
                            [g for g, _, _ in pairs])
    for c in copies:
        s, d = src_data[c.src_pool].reshape(-1).view(np.uint8), dst_data[c.dst_pool].reshape(-1).view(np.uint8)
        for so, do, n in zip(c.src, c.dst, c.length):
            d[do:do + n] = s[so:so + n]
    for pid, p in dst.items():
        want = array(p)
        for i, (g, slot) in enumerate(groups.placement(p.layers.start, p.layers.stop)):
            for group, s, d in pairs:
                if group == g:
                    want[d, slot] = kv[(p.layers.start + i, s)][:, p.kv_heads.start:p.kv_heads.stop]
        assert np.array_equal(dst_data[pid], want), pid
