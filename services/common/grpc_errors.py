"""Maps the services' exceptions onto gRPC status codes at the servicer boundary."""

from __future__ import annotations

import grpc

from services.common.kv_transfer import TransferError
from services.engine.errors import EngineInputError
from services.common.errors import Overloaded


async def abort_for(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Ends the RPC with the status that names what went wrong; re-raises anything unexpected."""
    if isinstance(exc, EngineInputError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, Overloaded):
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, TransferError):
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"KV transfer failed: {exc}")
    raise exc


async def stats_of(engine, instance_id: str, role: str, held: int = 0):
    """The InstanceStatsResponse of an instance's engine."""
    from distserve.v1 import worker_pb2

    def snapshot(e):
        return worker_pb2.InstanceStatsResponse(
            instance_id=instance_id, role=role, blocks_total=e.blocks.num_blocks, blocks_used=e.blocks.num_used,
            waiting=len(e.scheduler.waiting), running=len(e.scheduler.running), held=len(e.prefilled))

    response = await engine.call(snapshot)
    response.steps = engine.worker.steps
    return response
