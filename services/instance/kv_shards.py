"""Rank pools of TP/PP instances at the kvxfer boundary: their ids, the kvxfers serving them and their
registration there, the KVHandle's shard list, and a re-sharding pull split by source and destination kvxfer."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from distserve.v1 import kv_pb2
from services.common.pool_site import PoolSite, shard_to_pb
from services.engine.async_engine import AsyncEngine
from services.kvxfer.api import KVXferClient, RangeCopy, site_handles

log = logging.getLogger(__name__)


def rank_pool_id(instance_id: str, rank: int) -> str:
    """Rank 0's pool is registered under the instance id, rank r's under `{instance_id}.r{r}`."""
    return instance_id if rank == 0 else f"{instance_id}.r{rank}"


@dataclass(frozen=True, slots=True)
class Site:
    """The instance's pools one kvxfer serves (rank 0's host's, or another node's), by pool id: registered there and
    leased together under the first one's id (its `anchor`), whose owner the others name."""

    kvxfer: str  # "" for rank 0's host: the instance's own kvxfer
    pools: dict[str, PoolSite]

    @property
    def anchor(self) -> str:
        return next(iter(self.pools))


def instance_pools(instance_id: str, engine: AsyncEngine, kvxfer: str) -> dict[str, PoolSite]:
    """Every rank's pool by pool id, in rank order; a rank whose host's kvxfer is rank 0's own (`kvxfer`) counts
    as rank 0's site."""
    return {rank_pool_id(instance_id, rank): replace(pool, kvxfer="") if pool.kvxfer == kvxfer else pool
            for rank, pool in enumerate(engine.pool_sites())}


def by_site(pools: Mapping[str, PoolSite]) -> list[Site]:
    """The pools grouped by the kvxfer that serves them, rank 0's site first."""
    by_kvxfer: dict[str, dict[str, PoolSite]] = {}
    for pool_id, pool in pools.items():
        by_kvxfer.setdefault(pool.kvxfer, {})[pool_id] = pool
    return [Site(kvxfer, group) for kvxfer, group in by_kvxfer.items()]


async def register_site(kv: KVXferClient, instance_id: str, site: Site) -> None:
    """A site's pools with its kvxfer, each under its own id, covered by the anchor's leases: a /dev/shm file on CPU
    (the path as that host sees it), on GPU the CUDA IPC handle its process exported. Idempotent: a registration
    replaces the one before."""
    for pool_id, pool in site.pools.items():
        if pool_id != instance_id and pool.path is None and pool.cuda_ipc is None:
            log.warning("KV pool %s is neither a file nor a GPU allocation its host's kvxfer can map: pulls cannot "
                        "reach it", pool_id)
            continue
        await kv.register_pool(pool_id, pool, owner="" if pool_id == site.anchor else site.anchor)


def shards_to_pb(pools: Mapping[str, PoolSite]) -> list[kv_pb2.KVShard]:
    """The handle's shard list of the pools (by pool id, in rank order; the lease ids of other sites are filled in
    per handle); empty for a one-pool instance (the handle's own layout says it all)."""
    if len(pools) == 1:
        return []
    anchors = {site.kvxfer: site.anchor for site in by_site(pools)}
    return [shard_to_pb(pool_id, rank, pool, anchors[pool.kvxfer] if pool.kvxfer else "")
            for rank, (pool_id, pool) in enumerate(pools.items())]


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
