"""Which leases a KV handle holds, on which host: the one rule that the router (ending a lease nobody will pull)
and the instances (pulling a TP/PP source's pools site by site) both follow.

A handle is the lease at its source instance's own kvxfer; each of its shards served by another kvxfer (a rank
on another node) names the lease taken there, one per site, shared by that site's shards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc

log = logging.getLogger(__name__)


def site_handles(handle: kv_pb2.KVHandle) -> dict[str, kv_pb2.KVHandle]:
    """Per kvxfer holding a lease of the handle ("" for the source's own), the handle that lease is pulled and
    released by: the handle itself, or the same blocks under the lease taken at that kvxfer."""
    sites: dict[str, kv_pb2.KVHandle] = {"": handle}
    for shard in handle.shards:
        if shard.kvxfer_address and shard.kvxfer_address not in sites:
            sites[shard.kvxfer_address] = kv_pb2.KVHandle(
                instance_id=shard.lease_instance_id, kvxfer_address=shard.kvxfer_address, lease_id=shard.lease_id,
                block_ids=handle.block_ids, num_tokens=handle.num_tokens, layout=handle.layout,
                lease_expiry=handle.lease_expiry)
    return sites


def handle_leases(handle: kv_pb2.KVHandle) -> list[tuple[str, str]]:
    """(kvxfer address, lease id) of every lease the handle holds, its own first."""
    return [(site.kvxfer_address, site.lease_id) for site in site_handles(handle).values()]


async def release_handle(handle: kv_pb2.KVHandle, channel: Callable[[str], grpc.aio.Channel]) -> None:
    """Ends every lease of a handle nobody will pull (`channel`: a channel to a kvxfer address), so the source
    frees the blocks now; a lease that cannot be ended expires on its own, and the source frees them then."""
    for address, lease_id in handle_leases(handle):
        stub = kvxfer_pb2_grpc.KVXferStub(channel(address))
        try:
            await stub.Release(kvxfer_pb2.ReleaseRequest(lease_id=lease_id), timeout=2.0)
        except Exception as exc:
            log.warning("could not release lease %s at %s: %s", lease_id, address, exc)
