"""The worker's client of its host's kvxfer: register the pool, lease blocks, watch lease ends, pull.

    client = KVXferClient("127.0.0.1:50061")
    await client.register_pool("prefill-0", pool.site)            # a PoolSite (the engine's KVPool.site)
    handle = await client.create_lease("prefill-0", blocks, num_tokens, ttl_s=30)
    result = await client.pull(handle, "decode-0", dst_blocks, on_failure=block_manager.free)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc
from services.common.auth import TOOL
from services.common.errors import ServingError
from services.common.links import call_credential, call_metadata, internal_channel
from services.common.pool_site import PoolSite, register_request
from services.kvxfer.convert import stats_from_pb
from services.kvxfer.leases import LeaseEnd, LeaseState
from services.kvxfer.ranged import RangeCopy
from services.kvxfer.records import PullResult, Stats

RPC_MARGIN_S = 2.0  # the service gives up on a pull this long before the RPC deadline, so it reports why
STATES = {kvxfer_pb2.LeaseEvent.RELEASED: LeaseState.RELEASED, kvxfer_pb2.LeaseEvent.EXPIRED: LeaseState.EXPIRED}


class PullFailed(ServingError):
    """A pull that did not deliver the KV; `code` says why (FAILED_PRECONDITION: lease gone,
    UNAVAILABLE: source gone, DEADLINE_EXCEEDED, DATA_LOSS, INVALID_ARGUMENT, NOT_FOUND).

    Not the puller's fault: its client is told FAILED_PRECONDITION when the lease is gone, ABORTED otherwise,
    and the router re-prefills elsewhere."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.grpc_code = code if code == grpc.StatusCode.FAILED_PRECONDITION else grpc.StatusCode.ABORTED
        super().__init__(f"KV pull failed: {code.name}: {message}")


def pull_credential(principal: str) -> kvxfer_pb2.Credential | None:
    """`principal`'s token as a pull request carries it: in the body, with no call metadata
    (auth.BODY_CREDENTIAL_METHODS); None without a deployment secret."""
    pair = call_credential(principal)
    return None if pair is None else kvxfer_pb2.Credential(principal=pair[0], token=pair[1])


class KVXferClient:
    def __init__(self, address: str, principal: str = TOOL, local: bool = True) -> None:
        """`principal`: who calls (auth.py); an instance calls as itself, so kvxfer lets it use its own pool only.
        `local`: dial kvxfer's private socket when it serves one on this host (links.add_local_port), as an
        instance does with its host's kvxfer; False: always host:port (over mutual TLS where configured)."""
        self.address = address
        self._channel = internal_channel(address, principal, attach=False, local=local)
        self._md = call_metadata(principal)  # on every call: cheaper than a channel interceptor
        self._credential = pull_credential(principal)
        self._stub = kvxfer_pb2_grpc.KVXferStub(self._channel)

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Return once kvxfer's health service says SERVING; TimeoutError after timeout_s."""
        health = health_pb2_grpc.HealthStub(self._channel)
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.05)

    async def register_pool(self, instance_id: str, site: PoolSite, owner: str = "") -> None:
        """Let kvxfer map the pool at `site` (its /dev/shm file on CPU, its CUDA IPC handle on GPU) under the id
        `instance_id`; `owner`: the instance whose leases cover it (a TP/PP rank's pool registered under its own id).
        ValueError where the site has neither."""
        await self._stub.RegisterPool(register_request(instance_id, site, owner), metadata=self._md)

    async def unregister_pool(self, instance_id: str) -> int:
        """Unmap the pool; returns how many live leases were dropped (without events)."""
        reply = await self._stub.UnregisterPool(kvxfer_pb2.UnregisterPoolRequest(instance_id=instance_id),
                                                metadata=self._md)
        return reply.dropped_leases

    async def create_lease(self, instance_id: str, block_ids: Sequence[int], num_tokens: int,
                           ttl_s: float = 0.0, pulls: int = 1) -> kv_pb2.KVHandle:
        """Hold blocks for `pulls` pullers; the handle carries everything the puller's kvxfer needs."""
        return await self._stub.CreateLease(kvxfer_pb2.CreateLeaseRequest(
            instance_id=instance_id, block_ids=block_ids, num_tokens=num_tokens, ttl_s=ttl_s, pulls=pulls),
            metadata=self._md)

    async def watch_leases(self, instance_id: str) -> AsyncIterator[LeaseEnd]:
        """Lease ends of the instance as they happen; free a lease's blocks only on its event."""
        async for event in self._stub.WatchLeases(kvxfer_pb2.WatchLeasesRequest(instance_id=instance_id),
                                                  metadata=self._md):
            yield LeaseEnd(event.lease_id, event.instance_id, list(event.block_ids), STATES[event.reason])

    async def pull(self, handle: kv_pb2.KVHandle, dst_instance_id: str, dst_block_ids: Sequence[int], *,
                   checksum: bool = False, timeout_s: float | None = None,
                   on_failure: Callable[[list[int]], object] | None = None) -> PullResult:
        """Pull the handle's KV into dst_block_ids of dst_instance_id's pool (registered with this kvxfer).

        On failure raises PullFailed after calling on_failure(dst_block_ids), e.g. the block manager's
        free: the destination blocks hold no usable KV then. The source lease is released on success
        and kept (until expiry) on failure, so the pull may be retried.
        """
        request = kvxfer_pb2.PullRequest(source=handle, dst_instance_id=dst_instance_id,
                                         dst_block_ids=dst_block_ids, checksum=checksum, timeout_s=timeout_s or 0.0,
                                         credential=self._credential)
        try:
            reply = await self._stub.Pull(request, timeout=None if timeout_s is None else timeout_s + RPC_MARGIN_S)
        except BaseException as e:  # cancelled too: kvxfer then aborts the transfer within milliseconds
            if on_failure is not None:
                on_failure(list(dst_block_ids))
            if isinstance(e, grpc.aio.AioRpcError):
                raise PullFailed(e.code(), e.details() or "") from e
            raise
        return PullResult(reply.bytes, reply.seconds, reply.path, reply.crc32 if checksum else None)

    async def pull_ranges(self, handle: kv_pb2.KVHandle, copies: Sequence[RangeCopy], *, checksum: bool = False,
                          timeout_s: float | None = None, share: int = 1) -> PullResult:
        """Copy byte ranges from the handle's instance's pools into pools registered here (re-sharding); raises
        PullFailed. Lease rules as `pull`: released on success, kept on failure; `share`: this pull is one of that
        many (into pools at several kvxfers) that together count as one pull of the lease."""
        request = kvxfer_pb2.PullRangesRequest(source=handle, checksum=checksum, timeout_s=timeout_s or 0.0,
                                               lease_share=share, credential=self._credential)
        for c in copies:
            src, dst, length = c.to_bytes()
            request.copies.add(src_pool_id=c.src_pool, dst_pool_id=c.dst_pool, src_offsets=src, dst_offsets=dst,
                               lengths=length)
        try:
            reply = await self._stub.PullRanges(request, timeout=None if timeout_s is None else timeout_s + RPC_MARGIN_S)
        except grpc.aio.AioRpcError as e:
            raise PullFailed(e.code(), e.details() or "") from e
        return PullResult(reply.bytes, reply.seconds, reply.path, reply.crc32 if checksum else None)

    async def release(self, lease_id: str) -> bool:
        """Give up a lease unpulled (e.g. its request was cancelled); False if it had already ended."""
        return (await self._stub.Release(kvxfer_pb2.ReleaseRequest(lease_id=lease_id), metadata=self._md)).released

    async def stats(self) -> Stats:
        return stats_from_pb(await self._stub.Stats(kvxfer_pb2.StatsRequest(), metadata=self._md))

    async def close(self) -> None:
        await self._channel.close()
