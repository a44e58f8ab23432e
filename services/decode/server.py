"""gRPC servicer of a decode instance: protobuf in, DecodeCore, a stream of token chunks out."""

from __future__ import annotations

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import logprobs_to_proto, sampling_from_proto
from services.common.errors import abort_with
from services.decode.core import DecodeCore
from services.engine.async_engine import AsyncEngine
from services.instance.config import InstanceSettings
from services.instance.kv_sites import InstanceKV
from services.instance.servicer import InstanceServicer


class DecodeServicer(InstanceServicer, worker_pb2_grpc.DecodeServicer):
    role = "decode"

    def __init__(self, core: DecodeCore) -> None:
        self.core = core
        self.engine = core.engine
        self.instance_id = core.instance_id

    async def Decode(self, request: worker_pb2.DecodeRequest, context: grpc.aio.ServicerContext):
        try:
            first = request.first_token if request.HasField("first_token") else None
            kv = request.kv if request.HasField("kv") else None
            async for chunk in self.core.decode(request.request_id, list(request.prompt_token_ids), first,
                                                sampling_from_proto(request.sampling), kv, request.cache_namespace,
                                                request.local_prefill_cap):
                yield worker_pb2.TokenChunk(token_ids=chunk.token_ids, finish_reason=chunk.finish_reason,
                                            stamps=chunk.stamps.to_proto() if chunk.stamps else None,
                                            logprobs=logprobs_to_proto(chunk.logprobs),
                                            prompt_logprobs=logprobs_to_proto(chunk.prompt_logprobs),
                                            cached_tokens=chunk.cached_tokens, pulled_blocks=chunk.pulled_blocks,
                                            decode_cached_tokens=chunk.decode_cached_tokens)
        except Exception as exc:
            await abort_with(context, exc)

    async def LeasePrefix(self, request: worker_pb2.LeasePrefixRequest,
                          context: grpc.aio.ServicerContext) -> worker_pb2.LeasePrefixResponse:
        try:
            handle = await self.core.lease_prefix(list(request.prompt_token_ids), request.cache_namespace,
                                                  request.ttl_s)
        except Exception as exc:
            await abort_with(context, exc)
        return worker_pb2.LeasePrefixResponse(kv=handle)


async def add_decode(server: grpc.aio.Server, engine: AsyncEngine, settings: InstanceSettings, instance_id: str,
                     kv: InstanceKV):
    # a rank on another host: its pool is pulled into by that host's kvxfer, called as its site's anchor
    core = DecodeCore(engine, kv.kv, instance_id, settings.pull_timeout_s, settings.max_pending,
                      kv.pools, {pool_id: client for site, client in kv.remote() for pool_id in site.pools},
                      settings.local_prefill_share)
    core.start()
    worker_pb2_grpc.add_DecodeServicer_to_server(DecodeServicer(core), server)
    return core.stop
