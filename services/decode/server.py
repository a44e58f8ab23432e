"""gRPC servicer of a decode instance: protobuf in, DecodeCore, a stream of token chunks out."""

from __future__ import annotations

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import sampling_from_proto
from services.common.grpc_errors import abort_for, stats_of
from services.common.instance import InstanceSettings
from services.common.kv_shards import pool_shards
from services.decode.core import DecodeCore
from services.engine.async_engine import AsyncEngine
from services.engine.parallel.pools import rank_pools
from services.kvxfer.client import KVXferClient


class DecodeServicer(worker_pb2_grpc.DecodeServicer):
    def __init__(self, core: DecodeCore) -> None:
        self.core = core

    async def Decode(self, request: worker_pb2.DecodeRequest, context: grpc.aio.ServicerContext):
        try:
            async for chunk in self.core.decode(request.request_id, list(request.prompt_token_ids), request.first_token,
                                                sampling_from_proto(request.sampling), request.kv):
                yield worker_pb2.TokenChunk(token_ids=chunk.token_ids, finish_reason=chunk.finish_reason,
                                            stamps=chunk.stamps.to_proto() if chunk.stamps else None)
        except Exception as exc:
            await abort_for(context, exc)

    async def Stats(self, request: worker_pb2.InstanceStatsRequest, context: grpc.aio.ServicerContext) -> worker_pb2.InstanceStatsResponse:
        return await stats_of(self.core.engine, self.core.instance_id, "decode", request)


async def add_decode(server: grpc.aio.Server, engine: AsyncEngine, settings: InstanceSettings, instance_id: str,
                     kv: KVXferClient | None):
    core = DecodeCore(engine, kv, instance_id, settings.pull_timeout_s, settings.max_pending,
                      pool_shards(instance_id, rank_pools(engine.engine)))
    worker_pb2_grpc.add_DecodeServicer_to_server(DecodeServicer(core), server)

    async def stop() -> None:
        return None

    return stop
