"""gRPC servicer of a prefill instance: protobuf in, PrefillCore, protobuf out."""

from __future__ import annotations

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import logprobs_to_proto, sampling_from_proto
from services.common.errors import abort_with
from services.engine.async_engine import AsyncEngine
from services.instance.config import InstanceSettings
from services.instance.kv_shards import shards_to_pb
from services.instance.kv_sites import InstanceKV
from services.instance.servicer import InstanceServicer
from services.prefill.core import PrefillCore


class PrefillServicer(InstanceServicer, worker_pb2_grpc.PrefillServicer):
    role = "prefill"

    def __init__(self, core: PrefillCore) -> None:
        self.core = core
        self.engine = core.engine
        self.instance_id = core.instance_id

    async def Prefill(self, request: worker_pb2.PrefillRequest, context: grpc.aio.ServicerContext) -> worker_pb2.PrefillResponse:
        try:
            result = await self.core.prefill(request.request_id, list(request.prompt_token_ids),
                                             sampling_from_proto(request.sampling), max(1, request.pulls),
                                             request.cache_namespace,
                                             request.prefix if request.HasField("prefix") else None)
        except Exception as exc:
            await abort_with(context, exc)
        return worker_pb2.PrefillResponse(first_token=result.first_token, finish_reason=result.finish_reason,
                                          kv=result.handle, stamps=result.stamps.to_proto(),
                                          logprobs=logprobs_to_proto(result.logprobs),
                                          prompt_logprobs=logprobs_to_proto(result.prompt_logprobs),
                                          cached_tokens=result.cached_tokens, pulled_blocks=result.pulled_blocks)


async def add_prefill(server: grpc.aio.Server, engine: AsyncEngine, settings: InstanceSettings, instance_id: str,
                      kv: InstanceKV):
    # a rank on another host: its kvxfer, called as the pool its leases there are taken under (kvxfer's owner)
    core = PrefillCore(engine, kv.kv, instance_id, settings.lease_ttl_s, settings.max_pending, settings.pull_timeout_s,
                       shards_to_pb(kv.pools), [(client, site.anchor) for site, client in kv.remote()])
    core.start()
    worker_pb2_grpc.add_PrefillServicer_to_server(PrefillServicer(core), server)
    return core.stop
