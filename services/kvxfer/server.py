"""The KVXfer gRPC servicer: converts messages and calls the core; failures map to status codes.

Pull and PullRanges carry the caller's credential in the request (auth.BODY_CREDENTIAL_METHODS): they check it
first and authorize by its principal. A metadata token does not stand in for it: every client of these two
methods is KVXferClient, which sends the body credential, so accepting either would only add a second way in
(and a second path to test) for no caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc
from services.common.auth import TokenCheck, caller, require_credential
from services.common.pool_site import ipc_from_pb, layout_from_pb, layout_to_pb
from services.kvxfer.convert import lease_end_to_pb, source_from_pb, stats_to_pb
from services.kvxfer.core import KVXferCore
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.owners import Owners
from services.kvxfer.ranged import RangeCopy

CODES = {
    Failure.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Failure.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Failure.LEASE_GONE: grpc.StatusCode.FAILED_PRECONDITION,
    Failure.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Failure.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    Failure.DATA_LOSS: grpc.StatusCode.DATA_LOSS,
    Failure.MISCONFIGURED: grpc.StatusCode.FAILED_PRECONDITION,
}


class KVXferServicer(kvxfer_pb2_grpc.KVXferServicer):
    def __init__(self, core: KVXferCore, host_id: str, ucx_host: str, ucx_port: int,
                 tokens: TokenCheck | None) -> None:
        """`tokens`: the deployment's token check (None: no secret, no credential or owner checks)."""
        self._core = core
        self._tokens = tokens
        self._owners = Owners(core.leases, core.pools, tokens is not None)
        self._describe = kvxfer_pb2.DescribeResponse(host_id=host_id, ucx_host=ucx_host, ucx_port=ucx_port)

    async def RegisterPool(self, request: kvxfer_pb2.RegisterPoolRequest,
                           context: grpc.aio.ServicerContext) -> kvxfer_pb2.RegisterPoolResponse:
        await self._owners.require_registrant(context, caller(context), request.instance_id, request.owner)
        ipc = ipc_from_pb(request.cuda_ipc) if request.HasField("cuda_ipc") else None
        await _call(context, self._core.register_pool, request.instance_id, layout_from_pb(request.layout),
                    request.device or "cpu", request.shm_path or None, ipc, request.owner)
        return kvxfer_pb2.RegisterPoolResponse()

    async def UnregisterPool(self, request: kvxfer_pb2.UnregisterPoolRequest,
                             context: grpc.aio.ServicerContext) -> kvxfer_pb2.UnregisterPoolResponse:
        await self._owners.require_instance(context, caller(context), request.instance_id)
        return kvxfer_pb2.UnregisterPoolResponse(dropped_leases=self._core.unregister_pool(request.instance_id))

    async def CreateLease(self, request: kvxfer_pb2.CreateLeaseRequest,
                          context: grpc.aio.ServicerContext) -> kv_pb2.KVHandle:
        await self._owners.require_instance(context, caller(context), request.instance_id)
        lease, layout = await _call(context, self._core.create_lease, request.instance_id,
                                    list(request.block_ids), request.num_tokens, request.ttl_s,
                                    request.pulls)
        return kv_pb2.KVHandle(instance_id=lease.instance_id, kvxfer_address=self._core.address,
                               lease_id=lease.lease_id, block_ids=lease.block_ids, num_tokens=lease.num_tokens,
                               layout=layout_to_pb(layout), lease_expiry=lease.expiry)

    async def WatchLeases(self, request: kvxfer_pb2.WatchLeasesRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[kvxfer_pb2.LeaseEvent]:
        await self._owners.require_instance(context, caller(context), request.instance_id)
        queue = self._core.watch(request.instance_id)
        try:
            while True:
                yield lease_end_to_pb(await queue.get())
        finally:
            self._core.unwatch(request.instance_id, queue)

    async def Pull(self, request: kvxfer_pb2.PullRequest,
                   context: grpc.aio.ServicerContext) -> kvxfer_pb2.PullResponse:
        principal = await require_credential(self._tokens, request.credential.principal, request.credential.token,
                                             context)
        await self._owners.require_instance(context, principal, request.dst_instance_id)
        result = await _acall(context, self._core.pull(source_from_pb(request.source), request.dst_instance_id,
                                                       list(request.dst_block_ids), request.checksum,
                                                       request.timeout_s))
        return kvxfer_pb2.PullResponse(bytes=result.nbytes, seconds=result.seconds, path=result.path,
                                       crc32=result.crc or 0)

    async def PullRanges(self, request: kvxfer_pb2.PullRangesRequest,
                         context: grpc.aio.ServicerContext) -> kvxfer_pb2.PullResponse:
        principal = await require_credential(self._tokens, request.credential.principal, request.credential.token,
                                             context)
        try:
            copies = [RangeCopy.from_bytes(c.src_pool_id, c.dst_pool_id, c.src_offsets, c.dst_offsets, c.lengths)
                      for c in request.copies]
        except (XferError, ValueError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad ranges: {e}")
        for dst_pool in {c.dst_pool for c in copies}:  # as Pull: only the destination's instance writes into it
            await self._owners.require_instance(context, principal, dst_pool)
        result = await _acall(context, self._core.pull_ranges(source_from_pb(request.source), copies, request.checksum,
                                                              request.timeout_s, request.lease_share or 1))
        return kvxfer_pb2.PullResponse(bytes=result.nbytes, seconds=result.seconds, path=result.path,
                                       crc32=result.crc or 0)

    async def Release(self, request: kvxfer_pb2.ReleaseRequest,
                      context: grpc.aio.ServicerContext) -> kvxfer_pb2.ReleaseResponse:
        await self._owners.require_releaser(context, caller(context), request.lease_id)
        return kvxfer_pb2.ReleaseResponse(released=self._core.release(request.lease_id))

    async def Stats(self, request: kvxfer_pb2.StatsRequest,
                    context: grpc.aio.ServicerContext) -> kvxfer_pb2.StatsResponse:
        return stats_to_pb(self._core.stats())

    async def Describe(self, request: kvxfer_pb2.DescribeRequest,
                       context: grpc.aio.ServicerContext) -> kvxfer_pb2.DescribeResponse:
        return self._describe


async def _call(context: grpc.aio.ServicerContext, fn, *args):
    try:
        return fn(*args)
    except XferError as e:
        await context.abort(CODES[e.failure], str(e))


async def _acall(context: grpc.aio.ServicerContext, coro):
    try:
        return await coro
    except XferError as e:
        await context.abort(CODES[e.failure], str(e))
