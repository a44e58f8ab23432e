"""An instance's kvxfer clients, made once at start: its own host's, and one for each other host that serves some
of its rank pools (TP/PP ranks on other nodes). The pool keepers, the role's core and the shutdown share them."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.auth import instance_principal
from services.common.pool_site import PoolSite
from services.engine.async_engine import AsyncEngine
from services.instance.kv_shards import Site, by_site, instance_pools
from services.kvxfer.api import KVXferClient


@dataclass(frozen=True, slots=True)
class InstanceKV:
    """`kv`: the kvxfer of rank 0's host, called as the instance; `sites`: each site of the instance's pools with
    the client of the kvxfer serving it (rank 0's site first, its client `kv`), the others calling as their site's
    anchor (kvxfer lets only a pool's owner lease from it or pull into it)."""

    kv: KVXferClient
    pools: dict[str, PoolSite]  # every rank's by pool id, in rank order
    sites: list[tuple[Site, KVXferClient]]

    @classmethod
    def open(cls, instance_id: str, engine: AsyncEngine, kvxfer: str) -> InstanceKV:
        kv = KVXferClient(kvxfer, instance_principal(instance_id))
        pools = instance_pools(instance_id, engine, kvxfer)
        sites = [(site, KVXferClient(site.kvxfer, instance_principal(site.anchor)) if site.kvxfer else kv)
                 for site in by_site(pools)]
        return cls(kv, pools, sites)

    def remote(self) -> list[tuple[Site, KVXferClient]]:
        """The sites served by another kvxfer than rank 0's host's."""
        return [(site, client) for site, client in self.sites if site.kvxfer]
