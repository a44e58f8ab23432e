"""Rank pools of TP/PP instances at the kvxfer boundary: their ids and registration, and the KVHandle's shard list
⇄ PoolShards."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from distserve.v1 import kv_pb2
from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.engine.async_engine import AsyncEngine
from services.engine.parallel.pools import RankPool, rank_pools
from services.engine.parallel.shard import Span
from services.kvxfer.api import KVXferClient, RangeCopy, layout_from_pb, site_handles

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PoolShard:
    """A pool at kvxfer and what of the model's KV it holds."""

    pool_id: str
    layers: Span
    kv_heads: Span
    layout: KVLayout  # the pool's own: its layer slots (services/common/kv_groups.py), kv_heads.count heads


def rank_pool_id(instance_id: str, rank: int) -> str:
    """Rank 0's pool is registered under the instance id, rank r's under `{instance_id}.r{r}`."""
    return instance_id if rank == 0 else f"{instance_id}.r{rank}"


@dataclass(frozen=True, slots=True)
class PoolSite:
    """The instance's pools one kvxfer serves (rank 0's host's, or another node's): registered there and leased
    together under the first one's id (its `anchor`), whose owner the others name."""

    kvxfer: str  # "" for rank 0's host: the instance's own kvxfer
    pools: tuple[RankPool, ...]
    anchor: str


def instance_pools(engine: AsyncEngine, kvxfer: str) -> list[RankPool]:
    """Every rank's pool, rank 0 first; a rank whose host's kvxfer is rank 0's own (`kvxfer`) counts as rank 0's
    site."""
    return [replace(p, kvxfer="") if p.kvxfer == kvxfer else p for p in rank_pools(engine.engine)]


def pool_sites(instance_id: str, pools: list[RankPool]) -> list[PoolSite]:
    """The pools grouped by the kvxfer that serves them, rank 0's site first."""
    by_kvxfer: dict[str, list[RankPool]] = {}
    for pool in pools:
        by_kvxfer.setdefault(pool.kvxfer, []).append(pool)
    return [PoolSite(kvxfer, tuple(group), rank_pool_id(instance_id, group[0].rank))
            for kvxfer, group in by_kvxfer.items()]


async def register_site(kv: KVXferClient, instance_id: str, site: PoolSite) -> None:
    """A site's pools with its kvxfer, rank r's under its own id, covered by the site anchor's leases: a /dev/shm
    file on CPU (the path as that host sees it), on GPU the CUDA IPC handle its process exported (rank 0's:
    exported here). Idempotent: a registration replaces the one before."""
    for pool in site.pools:
        if pool.rank and pool.path is None and pool.cuda_ipc is None:
            log.warning("rank %d's KV pool is neither a file nor a GPU allocation its host's kvxfer can map: "
                        "pulls cannot reach it", pool.rank)
            continue
        pool_id = rank_pool_id(instance_id, pool.rank)
        await kv.register_pool(pool_id, pool, owner="" if pool_id == site.anchor else site.anchor)


def pool_shards(instance_id: str, pools: list[RankPool]) -> list[PoolShard]:
    return [PoolShard(rank_pool_id(instance_id, p.rank), p.layers, p.kv_heads, p.layout) for p in pools]


def shards_to_pb(instance_id: str, pools: list[RankPool]) -> list[kv_pb2.KVShard]:
    """The handle's shard list (the lease ids of other sites are filled in per handle); empty for a one-pool
    instance (the handle's own layout says it all)."""
    if len(pools) == 1:
        return []
    anchors = {site.kvxfer: site.anchor for site in pool_sites(instance_id, pools)}
    return [kv_pb2.KVShard(pool_id=rank_pool_id(instance_id, p.rank), rank=p.rank, layer_start=p.layers.start,
                           num_layers=p.layers.count, kv_head_start=p.kv_heads.start, num_kv_heads=p.kv_heads.count,
                           kvxfer_address=p.kvxfer, lease_instance_id=anchors[p.kvxfer] if p.kvxfer else "")
            for p in pools]


def with_site_leases(handle: kv_pb2.KVHandle, leases: dict[str, kv_pb2.KVHandle]) -> None:
    """Writes into each shard served by another kvxfer the lease taken there (`leases`: kvxfer → its handle)."""
    for shard in handle.shards:
        if shard.kvxfer_address:
            shard.lease_id = leases[shard.kvxfer_address].lease_id


def source_handles(handle: kv_pb2.KVHandle) -> dict[str, kv_pb2.KVHandle]:
    """Per source pool id, the handle a puller's kvxfer pulls it by (`site_handles`: one handle object per site)."""
    sites = site_handles(handle)
    return {shard.pool_id: sites[shard.kvxfer_address] for shard in handle.shards} or {handle.instance_id: handle}


@dataclass(frozen=True, slots=True)
class SitePull:
    """One pull of a re-sharding transfer: `copies` into pools that `kv` (their host's kvxfer) serves, from the
    pools of the source site `source` names, under its lease; `share`: how many pulls read that lease (together
    they count as one pull of it)."""

    kv: KVXferClient
    source: kv_pb2.KVHandle
    copies: list[RangeCopy]
    share: int


def site_pulls(handle: kv_pb2.KVHandle, copies: list[RangeCopy], kv: KVXferClient,
               kv_of: Mapping[str, KVXferClient]) -> list[SitePull]:
    """The copies of a re-sharding pull split by (source site, destination site): one pull each, sent to the
    kvxfer serving its destination pools (`kv_of[pool id]`, else `kv`: rank 0's). A source site none of whose
    pools is read (its KV heads replicas of another site's) gets an empty pull through `kv`, which ends its
    lease now rather than at expiry."""
    sources = source_handles(handle)
    parts: dict[tuple[int, int], SitePull] = {}
    for copy in copies:
        source, dst = sources[copy.src_pool], kv_of.get(copy.dst_pool, kv)
        parts.setdefault((id(source), id(dst)), SitePull(dst, source, [], 0)).copies.append(copy)
    reads = Counter(id(p.source) for p in parts.values())
    unread = {id(s): s for s in sources.values() if id(s) not in reads}
    return [replace(p, share=reads[id(p.source)]) for p in parts.values()] + \
        [SitePull(kv, source, [], 1) for source in unread.values()]


def shards_from_handle(handle: kv_pb2.KVHandle, groups: KVGroups | None = None) -> list[PoolShard]:
    """The source pools of a handle: its shards, or the instance's one pool holding every layer and head; with the
    model's layer `groups` (None: one group, a block holding every layer of a pool)."""
    full = layout_from_pb(handle.layout)
    if not handle.shards:
        layers = groups.num_layers if groups else full.num_layers
        return [PoolShard(handle.instance_id, Span(0, layers), Span(0, full.num_kv_heads), full)]
    return [PoolShard(s.pool_id, Span(s.layer_start, s.num_layers), Span(s.kv_head_start, s.num_kv_heads),
                      KVLayout(full.num_blocks, groups.slots(s.layer_start, s.layer_start + s.num_layers) if groups
                               else s.num_layers, full.block_size, s.num_kv_heads, full.head_dim, full.dtype))
            for s in handle.shards]
