"""Rank pools of TP/PP instances at the kvxfer boundary: their ids and registration, and the KVHandle's shard list
⇄ PoolShards."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from distserve.v1 import kv_pb2
from services.common.kv_layout import KVLayout
from services.engine.parallel.pools import RankPool
from services.engine.parallel.shard import Span
from services.kvxfer.client import KVXferClient
from services.kvxfer.convert import layout_from_pb

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PoolShard:
    """A pool at kvxfer and what of the model's KV it holds."""

    pool_id: str
    layers: Span
    kv_heads: Span
    layout: KVLayout  # the pool's own: layout.num_layers == layers.count, layout.num_kv_heads == kv_heads.count


def rank_pool_id(instance_id: str, rank: int) -> str:
    """Rank 0's pool is registered under the instance id, rank r's under `{instance_id}.r{r}`."""
    return instance_id if rank == 0 else f"{instance_id}.r{rank}"


async def register_rank_pools(kv: KVXferClient, instance_id: str, pools: list[RankPool]) -> None:
    """Every rank's pool with the host's kvxfer, rank r's under its own id, covered by the instance's leases: a
    /dev/shm file on CPU, on GPU the CUDA IPC handle its process exported (rank 0's: exported here)."""
    for pool in pools:
        if pool.rank and pool.path is None and pool.cuda_ipc is None:
            log.warning("rank %d's KV pool is neither a file nor a GPU allocation this host's kvxfer can map: "
                        "pulls cannot reach it", pool.rank)
            continue
        await kv.register_pool(rank_pool_id(instance_id, pool.rank), pool, owner=instance_id if pool.rank else "")


def pool_shards(instance_id: str, pools: list[RankPool]) -> list[PoolShard]:
    return [PoolShard(rank_pool_id(instance_id, p.rank), p.layers, p.kv_heads, p.layout) for p in pools]


def shards_to_pb(shards: list[PoolShard]) -> list[kv_pb2.KVShard]:
    """The handle's shard list; empty for a one-pool instance (the handle's own layout says it all)."""
    if len(shards) == 1:
        return []
    return [kv_pb2.KVShard(pool_id=s.pool_id, rank=r, layer_start=s.layers.start, num_layers=s.layers.count,
                           kv_head_start=s.kv_heads.start, num_kv_heads=s.kv_heads.count) for r, s in enumerate(shards)]


def shards_from_handle(handle: kv_pb2.KVHandle) -> list[PoolShard]:
    """The source pools of a handle: its shards, or the instance's one pool holding every layer and head."""
    full = layout_from_pb(handle.layout)
    if not handle.shards:
        return [PoolShard(handle.instance_id, Span(0, full.num_layers), Span(0, full.num_kv_heads), full)]
    return [PoolShard(s.pool_id, Span(s.layer_start, s.num_layers), Span(s.kv_head_start, s.num_kv_heads),
                      KVLayout(full.num_blocks, s.num_layers, full.block_size, s.num_kv_heads, full.head_dim, full.dtype))
            for s in handle.shards]
