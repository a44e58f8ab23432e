"""gRPC servicer of a colocated (vLLM-style) or chunked (Sarathi-style) instance."""

from __future__ import annotations

import time

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import sampling_from_proto
from services.common.errors import Overloaded
from services.common.grpc_errors import abort_for, stats_of
from services.common.instance import InstanceSettings
from services.common.stamps import Lifetime
from services.engine.async_engine import AsyncEngine
from services.kvxfer.client import KVXferClient


class ColocatedServicer(worker_pb2_grpc.ColocatedServicer):
    def __init__(self, engine: AsyncEngine, instance_id: str, role: str, max_pending: int) -> None:
        self.engine = engine
        self.instance_id = instance_id
        self.role = role
        self.max_pending = max_pending
        self.pending = 0

    async def Generate(self, request: worker_pb2.ColocatedRequest, context: grpc.aio.ServicerContext):
        try:
            params = sampling_from_proto(request.sampling)
            prompt = list(request.prompt_token_ids)
            self.engine.engine.validate(prompt, params)
            if self.pending >= self.max_pending:
                raise Overloaded(f"queue full ({self.pending} requests)")
            self.pending += 1
            try:
                stamps = Lifetime(prefill_queued=time.time())
                first = True
                async for out in self.engine.generate(request.request_id, prompt, params):
                    if first:
                        stamps.prefill_start, stamps.prefill_end = out.step_start, out.step_end
                        stamps.decode_start = out.step_end
                    reason = out.finish_reason.value if out.finish_reason else ""
                    yield worker_pb2.TokenChunk(token_ids=out.new_token_ids, finish_reason=reason,
                                                stamps=stamps.to_proto() if first else None)
                    first = False
            finally:
                self.pending -= 1
        except Exception as exc:
            await abort_for(context, exc)

    async def Stats(self, request: worker_pb2.InstanceStatsRequest, context: grpc.aio.ServicerContext) -> worker_pb2.InstanceStatsResponse:
        return await stats_of(self.engine, self.instance_id, self.role, request)


async def add_colocated(server: grpc.aio.Server, engine: AsyncEngine, settings: InstanceSettings, instance_id: str,
                        kv: KVXferClient | None):
    worker_pb2_grpc.add_ColocatedServicer_to_server(
        ColocatedServicer(engine, instance_id, settings.role, settings.max_pending), server)

    async def stop() -> None:
        return None

    return stop
