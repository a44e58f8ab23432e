"""The byte ranges of a re-sharding pull: each destination rank's pool gets exactly its layers and KV heads of
the pulled blocks, from whichever source ranks' pools hold them.

A pool is `[blocks, slots, 2, kv_heads, block_size, head_dim]` (services/common/kv_layout.py): a block holds the
layers of one layer group (services/common/kv_groups.py), so a layer's K/V is in its group's blocks, at its slot in
that pool. For one block, layer and K or V, a run of KV heads is contiguous (block_size rows each); runs that
follow each other on both sides merge (a whole block when source and destination hold the same layers and heads).
Built with numpy: no Python loop per block or head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from services.common.kv_groups import KVGroups
from services.common.pool_site import PoolSite
from services.common.span import Span
from services.kvxfer.api import RangeCopy


def _overlap(a: Span, b: Span) -> Span | None:
    start, stop = max(a.start, b.start), min(a.stop, b.stop)
    return Span(start, stop - start) if stop > start else None


def _slots(site: PoolSite, layers: list[int], groups: KVGroups | None) -> np.ndarray:
    """The slots of `layers` in the pool (one group: a block holds every layer of the pool in order)."""
    if groups is None:
        return np.asarray(layers) - site.layers.start
    places = groups.placement(site.layers.start, site.layers.stop)
    return np.asarray([places[layer - site.layers.start][1] for layer in layers])


def _offsets(site: PoolSite, blocks: np.ndarray, slots: np.ndarray, heads: Span) -> np.ndarray:
    """Byte offsets [B, layers, 2] of the first of `heads` in K and V of the layers at `slots` of `blocks`."""
    lay = site.layout
    b = blocks[:, None, None]
    layer = slots[None, :, None]
    kv = np.arange(2)[None, None, :]
    head = ((b * lay.num_layers + layer) * 2 + kv) * lay.num_kv_heads + heads.start - site.kv_heads.start
    return head * lay.block_size * lay.head_dim * lay.itemsize


def _merge(src: np.ndarray, dst: np.ndarray, unit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-length ranges (in order) merged where they follow each other on both sides."""
    starts = np.ones(len(src), dtype=bool)
    starts[1:] = (src[1:] != src[:-1] + unit) | (dst[1:] != dst[:-1] + unit)
    first = np.flatnonzero(starts)
    lengths = np.diff(np.append(first, len(src))) * unit
    return src[first], dst[first], lengths


def reshard_copies(src: Mapping[str, PoolSite], src_blocks: Sequence[int], dst: Mapping[str, PoolSite],
                   dst_blocks: Sequence[int], groups: KVGroups | None = None,
                   block_groups: Sequence[int] | None = None) -> list[RangeCopy]:
    """One RangeCopy per (source pool, destination pool) that share layers and heads (pools by their id at kvxfer);
    src_blocks[i] → dst_blocks[i], blocks of layer group block_groups[i] (of `groups`; none given: one group of
    every layer).

    Where several source pools hold the same heads (KV replicated across TP ranks) the first one is read."""
    if len(src_blocks) != len(dst_blocks):
        raise ValueError(f"{len(src_blocks)} source blocks but {len(dst_blocks)} destination blocks")
    sb, db = np.asarray(src_blocks, np.int64), np.asarray(dst_blocks, np.int64)
    bg = np.zeros(len(sb), np.int64) if block_groups is None else np.asarray(block_groups, np.int64)
    copies = []
    for d_id, d in dst.items():
        covered: list[tuple[Span, Span]] = []  # (layers, heads) of d already taken from an earlier source
        for s_id, s in src.items():
            if s.layout.head_dim != d.layout.head_dim or s.layout.dtype != d.layout.dtype \
                    or s.layout.block_size != d.layout.block_size:
                raise ValueError(f"pools {s_id} and {d_id} differ in head size, dtype or block size")
            layers, heads = _overlap(s.layers, d.layers), _overlap(s.kv_heads, d.kv_heads)
            if layers is None or heads is None or any(_overlap(layers, cl) and _overlap(heads, ch) for cl, ch in covered):
                continue
            covered.append((layers, heads))
            unit = heads.count * d.layout.block_size * d.layout.head_dim * d.layout.itemsize
            so, do = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
            for g in range(groups.count if groups else 1):
                members = [layer for layer in range(layers.start, layers.stop) if groups is None or groups.group_of(layer) == g]
                pick = bg == g
                if members and pick.any():
                    so.append(_offsets(s, sb[pick], _slots(s, members, groups), heads).ravel())
                    do.append(_offsets(d, db[pick], _slots(d, members, groups), heads).ravel())
            copies.append(RangeCopy(s_id, d_id, *_merge(np.concatenate(so), np.concatenate(do), unit)))
    return copies
