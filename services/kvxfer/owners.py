"""Who may use a pool: only the instance that registered it, by the principal its token proves (auth.py).

Registering, unregistering, leasing from and watching a pool, and pulling into one, are the owner's alone.
A lease may be released by its pool's owner or by the router (which holds the handle when a request ends
before decode). A pull needs the lease's id, which only the handle issued for it carries. With internal
authentication off (no deployment secret) nothing is checked.
"""

from __future__ import annotations

import grpc

from services.common.auth import ROUTER, caller, instance_principal
from services.kvxfer.leases import LeaseTable


class Owners:
    def __init__(self, leases: LeaseTable, enforce: bool) -> None:
        self._leases = leases
        self.enforce = enforce

    async def require_instance(self, context: grpc.aio.ServicerContext, instance_id: str) -> None:
        """Abort with PERMISSION_DENIED unless the caller is instance `instance_id`."""
        if self.enforce and caller(context) != instance_principal(instance_id):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"only instance {instance_id!r} may use its pool (caller {caller(context)!r})")

    async def require_releaser(self, context: grpc.aio.ServicerContext, lease_id: str) -> None:
        """Abort with PERMISSION_DENIED unless the caller owns the lease's pool or is the router."""
        lease = self._leases.leases.get(lease_id)
        if self.enforce and lease is not None and caller(context) not in (ROUTER, instance_principal(lease.instance_id)):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"lease {lease_id} belongs to instance {lease.instance_id!r}")
