"""gRPC servicer of a colocated (vLLM-style) or chunked (Sarathi-style) instance."""

from __future__ import annotations

import time

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import logprobs_to_proto, sampling_from_proto
from services.common.errors import abort_with
from services.common.stamps import Lifetime
from services.engine.async_engine import AsyncEngine, fork_id
from services.instance.config import InstanceSettings
from services.instance.kv_sites import InstanceKV
from services.instance.request_bound import RequestBound
from services.instance.servicer import InstanceServicer


class ColocatedServicer(InstanceServicer, worker_pb2_grpc.ColocatedServicer):
    def __init__(self, engine: AsyncEngine, instance_id: str, role: str, max_pending: int) -> None:
        self.engine = engine
        self.instance_id = instance_id
        self.role = role
        self.bound = RequestBound(max_pending, role)

    async def Generate(self, request: worker_pb2.ColocatedRequest, context: grpc.aio.ServicerContext):
        try:
            params = sampling_from_proto(request.sampling)
            prompt = list(request.prompt_token_ids)
            n = max(1, request.n)
            self.engine.validate(prompt, params)
            index = {fork_id(request.request_id, i): i for i in range(1, n)}
            with self.bound.slot():
                stamps = Lifetime(prefill_queued=time.time())
                first = True
                async for out in self.engine.generate(request.request_id, prompt, params, n, request.cache_namespace):
                    if first:
                        stamps.prefill_start, stamps.prefill_end = out.step_start, out.step_end
                        stamps.decode_start = out.step_end
                    reason = out.finish_reason.value if out.finish_reason else ""
                    yield worker_pb2.TokenChunk(token_ids=out.new_token_ids, finish_reason=reason,
                                                stamps=stamps.to_proto() if first else None,
                                                logprobs=logprobs_to_proto(out.logprobs),
                                                prompt_logprobs=logprobs_to_proto(out.prompt_logprobs),
                                                index=index.get(out.request_id, 0),
                                                cached_tokens=out.num_cached_tokens)
                    first = False
        except Exception as exc:
            await abort_with(context, exc)

    async def EndChoice(self, request: worker_pb2.EndChoiceRequest,
                        context: grpc.aio.ServicerContext) -> worker_pb2.EndChoiceResponse:
        choice = fork_id(request.request_id, request.index) if request.index else request.request_id
        return worker_pb2.EndChoiceResponse(ended=await self.engine.end(choice))


async def add_colocated(server: grpc.aio.Server, engine: AsyncEngine, settings: InstanceSettings, instance_id: str,
                        kv: InstanceKV | None):
    worker_pb2_grpc.add_ColocatedServicer_to_server(
        ColocatedServicer(engine, instance_id, settings.role, settings.max_pending), server)

    async def stop() -> None:
        return None

    return stop
