"""A prefill and a decode instance on real gRPC servers and a real kvxfer, and a conversation's turns through them
by each multi-turn path (tests/integration/kvxfer/test_multi_turn.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import grpc

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.convert import sampling_to_proto
from services.common.net import free_port
from services.common.pool_files import shm_path
from services.common.sampling import SamplingParams
from services.decode.core import DecodeCore
from services.decode.server import DecodeServicer
from services.engine.async_engine import AsyncEngine
from services.engine.engine import EngineConfig, LLMEngine
from services.kvxfer.client import KVXferClient
from services.prefill.core import PrefillCore
from services.prefill.server import PrefillServicer

Path = Literal["disagg", "local", "reverse"]
PARAMS = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=2)


@dataclass
class Pair:
    """A prefill and a decode instance (engines with block size 4) behind one gRPC server."""

    prefill_engine: AsyncEngine
    decode_engine: AsyncEngine
    kv: KVXferClient
    prefill: worker_pb2_grpc.PrefillStub
    decode: worker_pb2_grpc.DecodeStub
    address: str  # of the gRPC server of both
    closers: list = field(default_factory=list)

    async def computed(self) -> tuple[int, int]:
        """Tokens the prefill and the decode engine computed so far."""
        return ((await self.prefill_engine.stats()).computed_tokens, (await self.decode_engine.stats()).computed_tokens)

    async def settled(self) -> bool:
        """Whether, within 5 s, neither engine holds a block and the kvxfer holds no lease."""
        try:
            async with asyncio.timeout(5):
                while ((await self.prefill_engine.stats()).blocks_used or (await self.decode_engine.stats()).blocks_used
                       or (await self.kv.stats()).live_leases):
                    await asyncio.sleep(0.02)
        except TimeoutError:
            return False
        return True


@dataclass
class Turn:
    tokens: list[int]
    logprobs: list[float]
    first: worker_pb2.TokenChunk  # the decode's first message
    prefilled: worker_pb2.PrefillResponse | None = None


async def start_pair(model: str, kvxfer: str, tag: str, caching: str, prefill_pending: int = 8,
                     local_prefill_share: float = 1.0, num_blocks: int = 64, block_size: int = 4) -> Pair:
    """The instances `{tag}-p` and `{tag}-d`, their pools registered with `kvxfer`; `Pair.closers` stop them."""
    engines, kvs = [], []
    for role in ("prefill", "decode"):
        engine = AsyncEngine(LLMEngine(EngineConfig(model, policy=role, num_blocks=num_blocks, block_size=block_size,
                                                    prefix_caching=caching, pool_path=shm_path(f"{tag}-{role[0]}"))))
        kv = KVXferClient(kvxfer)
        await kv.register_pool(f"{tag}-{role[0]}", engine.pool_sites()[0])
        engines.append(engine)
        kvs.append(kv)
    prefill = PrefillCore(engines[0], kvs[0], f"{tag}-p", lease_ttl_s=30, max_pending=prefill_pending, pull_timeout_s=5)
    prefill.start()
    decode = DecodeCore(engines[1], kvs[1], f"{tag}-d", pull_timeout_s=5, max_pending=8,
                        local_prefill_share=local_prefill_share)
    decode.start()
    server = grpc.aio.server()
    worker_pb2_grpc.add_PrefillServicer_to_server(PrefillServicer(prefill), server)
    worker_pb2_grpc.add_DecodeServicer_to_server(DecodeServicer(decode), server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")

    async def close() -> None:
        await channel.close()
        await server.stop(None)
        await prefill.stop()
        await decode.stop()
        for engine, kv in zip(engines, kvs):
            engine.stop()
            engine.engine.close()
            await kv.close()

    return Pair(engines[0], engines[1], kvs[0], worker_pb2_grpc.PrefillStub(channel),
                worker_pb2_grpc.DecodeStub(channel), f"127.0.0.1:{port}", [close])


async def turn(pair: Pair, request_id: str, prompt: list[int], path: Path, namespace: str = "") -> Turn:
    """One turn of the conversation by `path`: its tokens, their logprobs and the decode's first message."""
    sampling = sampling_to_proto(PARAMS)
    tokens: list[int] = []
    logprobs: list[float] = []
    request = worker_pb2.DecodeRequest(request_id=request_id, prompt_token_ids=prompt, sampling=sampling,
                                       cache_namespace=namespace)
    prefilled = None
    if path != "local":
        prefill = worker_pb2.PrefillRequest(request_id=request_id, prompt_token_ids=prompt, sampling=sampling,
                                            cache_namespace=namespace)
        if path == "reverse":
            leased = await pair.decode.LeasePrefix(worker_pb2.LeasePrefixRequest(
                prompt_token_ids=prompt, cache_namespace=namespace))
            if leased.HasField("kv"):
                prefill.prefix.CopyFrom(leased.kv)
        prefilled = await pair.prefill.Prefill(prefill)
        tokens.append(prefilled.first_token)
        logprobs.extend(lp.logprob for lp in prefilled.logprobs)
        request.first_token = prefilled.first_token
        request.kv.CopyFrom(prefilled.kv)
    chunks = [chunk async for chunk in pair.decode.Decode(request)]
    for chunk in chunks:
        tokens.extend(chunk.token_ids)
        logprobs.extend(lp.logprob for lp in chunk.logprobs)
    return Turn(tokens, logprobs, chunks[0], prefilled)
