"""The worker protocol over a mock engine: Prefill, Decode (with LeasePrefix) and Stats as the real instances
serve them, and the Release of a lease as a kvxfer serves it. Protobuf in, MockEngine, protobuf out."""

from __future__ import annotations

import time

import grpc

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc, worker_pb2, worker_pb2_grpc
from services.common.convert import sampling_from_proto
from services.common.errors import EngineInputError, abort_with
from services.common.kv_layout import KVLayout
from services.common.pool_site import layout_to_pb
from services.common.prefix_hash import block_hashes, to_wire
from services.common.stamps import Lifetime
from services.instance.request_bound import RequestBound
from services.instance.stats import stats_reply
from services.mocker.engine import MockEngine, Seq
from services.mocker.leases import LeaseTable


class MockWorker:
    """What a prefill and a decode mock share: the engine, the bound on its requests, leases and Stats."""

    role = ""

    def __init__(self, engine: MockEngine, kvxfer: str) -> None:
        self.engine = engine
        self.kvxfer = kvxfer  # the address serving Release for this process's leases
        self.bound = RequestBound(engine.settings.max_pending, self.role)

    def handle(self, blocks: list[int], num_tokens: int, namespace: str, prompt: list[int]) -> kv_pb2.KVHandle:
        """Leases `blocks` (held until pulled, released or expired) and names them as a real handle does."""
        e = self.engine
        lease_id, expiry = e.leases.create(e.instance_id, blocks, e.settings.lease_ttl_s, e.free)
        m = e.model
        return kv_pb2.KVHandle(
            instance_id=e.instance_id, kvxfer_address=self.kvxfer, lease_id=lease_id, block_ids=blocks,
            num_tokens=num_tokens, lease_expiry=expiry,
            layout=layout_to_pb(KVLayout(e.blocks.num_blocks, m.num_layers, e.blocks.block_size, m.num_kv_heads,
                                         m.head_dim, "float16")),
            block_hashes=to_wire(block_hashes(prompt, e.blocks.block_size, namespace, len(prompt) // e.blocks.block_size)))

    async def Stats(self, request: worker_pb2.InstanceStatsRequest,
                    context: grpc.aio.ServicerContext) -> worker_pb2.InstanceStatsResponse:
        return stats_reply(self.engine.stats(request.steps_since or None), self.engine.instance_id, self.role)


class MockPrefill(MockWorker, worker_pb2_grpc.PrefillServicer):
    role = "prefill"

    async def Prefill(self, request: worker_pb2.PrefillRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.PrefillResponse:
        prompt, e = list(request.prompt_token_ids), self.engine
        try:
            params = sampling_from_proto(request.sampling)
            e.validate(prompt, params)
            stamps = Lifetime(prefill_queued=time.time())
            with self.bound.slot():
                lent = await self._lent(request.prefix, prompt) if request.HasField("prefix") else []
                seq = await e.prefill(prompt, request.cache_namespace, lent)
        except Exception as exc:
            await abort_with(context, exc)
        stamps.prefill_start, stamps.prefill_end = seq.step_start, seq.step_end
        first = e.token(prompt, len(prompt))
        reply = worker_pb2.PrefillResponse(first_token=first, stamps=stamps.to_proto(), cached_tokens=seq.cached,
                                           pulled_blocks=len(lent))
        if params.max_tokens == 1:
            e.free(seq.blocks)
            reply.finish_reason = "length"
        else:
            reply.kv.CopyFrom(self.handle(seq.blocks, len(prompt), request.cache_namespace, prompt))
        return reply

    async def _lent(self, prefix: kv_pb2.KVHandle, prompt: list[int]) -> list[int]:
        """A reverse pull: the leased prefix's blocks (up to the block of the last prompt token) cost their bytes
        to pull; the lease ends. Returns them (as the blocks the prefill does not compute)."""
        e = self.engine
        usable = min(len(prefix.block_ids), (len(prompt) - 1) // e.blocks.block_size)
        bytes_ = usable * e.blocks.block_size * e.settings.kv_bytes_per_token
        await e.leases.pull(prefix.lease_id, bytes_)
        return list(prefix.block_ids[:usable])


class MockDecode(MockWorker, worker_pb2_grpc.DecodeServicer):
    role = "decode"

    async def Decode(self, request: worker_pb2.DecodeRequest, context: grpc.aio.ServicerContext):
        prompt, e = list(request.prompt_token_ids), self.engine
        try:
            params = sampling_from_proto(request.sampling)
            e.validate(prompt, params)
            kv = request.kv if request.HasField("kv") else None
            first = request.first_token if request.HasField("first_token") else None
            if kv is None and first is not None:
                raise EngineInputError("first_token", "needs the K/V it follows (kv)")
            if kv is not None and kv.num_tokens != len(prompt):
                raise EngineInputError("kv.num_tokens", f"{kv.num_tokens} != prompt length {len(prompt)}")
            stamps = Lifetime(decode_queued=time.time()) if kv else Lifetime(prefill_queued=time.time())
            with self.bound.slot():
                stream = e.decode(prompt, first, request.cache_namespace, params.max_tokens,
                                  (kv.lease_id, len(kv.block_ids)) if kv else None, request.local_prefill_cap)
                started = False
                async for token, seq in stream:
                    chunk = worker_pb2.TokenChunk(token_ids=[token])
                    if not started:
                        started = True
                        chunk.MergeFrom(self._first(seq, stamps, kv))
                    if len(seq.output) >= seq.max_tokens:
                        chunk.finish_reason = "length"
                    yield chunk
        except Exception as exc:
            await abort_with(context, exc)

    def _first(self, seq: Seq, stamps: Lifetime, kv: kv_pb2.KVHandle | None) -> worker_pb2.TokenChunk:
        if kv is None:
            stamps.prefill_start, stamps.prefill_end = seq.step_start, seq.step_end
            stamps.decode_start = seq.step_end
            return worker_pb2.TokenChunk(stamps=stamps.to_proto(), cached_tokens=seq.cached)
        stamps.decode_start = seq.step_start
        bs = self.engine.blocks.block_size
        return worker_pb2.TokenChunk(stamps=stamps.to_proto(), decode_cached_tokens=seq.cached,
                                     pulled_blocks=max(0, len(kv.block_ids) - seq.cached // bs))

    async def LeasePrefix(self, request: worker_pb2.LeasePrefixRequest,
                          context: grpc.aio.ServicerContext) -> worker_pb2.LeasePrefixResponse:
        prompt, e = list(request.prompt_token_ids), self.engine
        held = e.cached_prefix(prompt, request.cache_namespace, len(prompt) - 1)
        if not held:
            return worker_pb2.LeasePrefixResponse()
        tokens = len(held) * e.blocks.block_size
        return worker_pb2.LeasePrefixResponse(kv=self.handle(held, tokens, request.cache_namespace, prompt[:tokens]))


class MockXfer(kvxfer_pb2_grpc.KVXferServicer):
    """Release, as a kvxfer serves it, over the process's lease table (the router ends unpulled leases so)."""

    def __init__(self, leases: LeaseTable) -> None:
        self.leases = leases

    async def Release(self, request: kvxfer_pb2.ReleaseRequest,
                      context: grpc.aio.ServicerContext) -> kvxfer_pb2.ReleaseResponse:
        self.leases.end(request.lease_id)
        return kvxfer_pb2.ReleaseResponse()
