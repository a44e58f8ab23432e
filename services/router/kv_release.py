"""Ends a prefilled request's K/V lease at its source kvxfer when no decode instance will pull it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc
from services.router.dispatch import Dispatcher

log = logging.getLogger(__name__)


def handle_leases(handle: kv_pb2.KVHandle) -> list[tuple[str, str]]:
    """(kvxfer address, lease id) of every lease of the handle: its own, and one per other host its source
    instance's ranks run on (their shards name it)."""
    others = ((s.kvxfer_address, s.lease_id) for s in handle.shards if s.kvxfer_address)
    return list(dict.fromkeys([(handle.kvxfer_address, handle.lease_id), *others]))


def lease_releaser(dispatcher: Dispatcher) -> Callable[[kv_pb2.KVHandle], Awaitable[None]]:
    async def release(handle: kv_pb2.KVHandle) -> None:
        for address, lease_id in handle_leases(handle):
            stub = kvxfer_pb2_grpc.KVXferStub(dispatcher.channel(address))
            try:
                await stub.Release(kvxfer_pb2.ReleaseRequest(lease_id=lease_id), timeout=2.0)
            except Exception as exc:  # the lease expires on its own; the prefill frees the blocks then
                log.warning("could not release lease %s at %s: %s", lease_id, address, exc)

    return release
