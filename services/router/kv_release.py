"""Ends a prefilled request's K/V lease at its source kvxfer when no decode instance will pull it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc
from services.router.dispatch import Dispatcher

log = logging.getLogger(__name__)


def lease_releaser(dispatcher: Dispatcher) -> Callable[[kv_pb2.KVHandle], Awaitable[None]]:
    async def release(handle: kv_pb2.KVHandle) -> None:
        stub = kvxfer_pb2_grpc.KVXferStub(dispatcher.channel(handle.kvxfer_address))
        try:
            await stub.Release(kvxfer_pb2.ReleaseRequest(lease_id=handle.lease_id), timeout=2.0)
        except Exception as exc:  # the lease expires on its own; the prefill frees the blocks then
            log.warning("could not release lease %s: %s", handle.lease_id, exc)

    return release
