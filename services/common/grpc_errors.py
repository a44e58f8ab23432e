"""Maps the instances' exceptions onto gRPC statuses at the servicer boundary, and their Stats reply."""

from __future__ import annotations

import grpc

from distserve.v1 import worker_pb2
from services.common.errors import Overloaded
from services.engine.async_engine import AsyncEngine
from services.engine.engine import LLMEngine
from services.engine.errors import EngineInputError
from services.engine.worker import EngineFailed
from services.kvxfer.client import PullFailed


async def abort_for(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Ends the RPC with the status that names what went wrong; re-raises anything unexpected."""
    if isinstance(exc, EngineInputError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, Overloaded):
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, EngineFailed):
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))  # the router retries elsewhere
    if isinstance(exc, PullFailed):
        # Not this instance's fault: the K/V's source or lease is gone; the router re-prefills elsewhere.
        code = grpc.StatusCode.FAILED_PRECONDITION if exc.code == grpc.StatusCode.FAILED_PRECONDITION else grpc.StatusCode.ABORTED
        await context.abort(code, f"KV pull failed: {exc}")
    raise exc


async def stats_of(engine: AsyncEngine, instance_id: str, role: str,
                   request: worker_pb2.InstanceStatsRequest) -> worker_pb2.InstanceStatsResponse:
    def snapshot(e: LLMEngine) -> worker_pb2.InstanceStatsResponse:
        steps = e.step_log.since(request.steps_since) if request.steps_since else []
        return worker_pb2.InstanceStatsResponse(
            instance_id=instance_id, role=role, blocks_total=e.blocks.num_blocks, blocks_used=e.blocks.num_used,
            waiting=len(e.scheduler.waiting), running=len(e.scheduler.running), held=len(e.prefilled),
            step_log=[worker_pb2.StepStat(kind=r.kind, seqs=r.seqs, tokens=r.tokens, sum_sq=r.sum_sq,
                                          context=r.context, start=r.start, seconds=r.seconds) for r in steps])

    response = await engine.call(snapshot)
    response.steps = engine.worker.steps
    return response
