"""Who may use a pool: only the instance that registered it, by the principal its token proves (auth.py).

Registering, unregistering, leasing from and watching a pool, and pulling into one, are the owner's alone
(a tensor-parallel rank's pool belongs to the instance named as its owner at registration).
A lease may be released by its pool's owner or by the router (which holds the handle when a request ends
before decode). A pull needs the lease's id, which only the handle issued for it carries. With internal
authentication off (no deployment secret) nothing is checked.

Every check takes the caller's principal as proven by its token: `caller(context)` on calls that carry it as
metadata, the request's credential on the pulls (auth.BODY_CREDENTIAL_METHODS).
"""

from __future__ import annotations

import grpc

from services.common.auth import ROUTER, instance_principal
from services.kvxfer.leases import LeaseTable
from services.kvxfer.pools import MappedPool


class Owners:
    def __init__(self, leases: LeaseTable, pools: dict[str, MappedPool], enforce: bool) -> None:
        self._leases = leases
        self._pools = pools
        self.enforce = enforce

    def owner_of(self, pool_id: str) -> str:
        pool = self._pools.get(pool_id)
        return (pool.owner or pool_id) if pool is not None else pool_id

    async def require_instance(self, context: grpc.aio.ServicerContext, caller: str, pool_id: str) -> None:
        """Abort with PERMISSION_DENIED unless `caller` is the instance that owns pool `pool_id`."""
        await self._require(context, caller, self.owner_of(pool_id), pool_id)

    async def require_registrant(self, context: grpc.aio.ServicerContext, caller: str, pool_id: str,
                                 owner: str) -> None:
        """Abort unless `caller` is `owner` (or `pool_id` itself) and no other instance holds the pool id."""
        claimed = owner or pool_id
        await self._require(context, caller, claimed, pool_id)
        if self.enforce and self.owner_of(pool_id) != claimed and pool_id in self._pools:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"pool {pool_id!r} belongs to another instance")

    async def _require(self, context: grpc.aio.ServicerContext, caller: str, owner: str, pool_id: str) -> None:
        if self.enforce and caller != instance_principal(owner):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"only instance {owner!r} may use pool {pool_id!r} (caller {caller!r})")

    async def require_releaser(self, context: grpc.aio.ServicerContext, caller: str, lease_id: str) -> None:
        """Abort with PERMISSION_DENIED unless `caller` owns the lease's pool or is the router."""
        lease = self._leases.get(lease_id)
        if self.enforce and lease is not None and caller not in (
                ROUTER, instance_principal(self.owner_of(lease.instance_id))):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"lease {lease_id} belongs to instance {lease.instance_id!r}")
