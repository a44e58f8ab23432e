"""The prefill instance's logic: admit, run to the first token, lease the K/V, free it when the lease ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from distserve.v1 import kv_pb2
from services.common.errors import Unavailable
from services.common.sampling import SamplingParams, TokenLogprobs
from services.common.stamps import Lifetime
from services.engine.async_engine import AsyncEngine
from services.instance.admission import Admission
from services.kvxfer.client import KVXferClient
from services.kvxfer.lease_keeper import LeaseKeeper


@dataclass(slots=True)
class PrefillResult:
    first_token: int
    finish_reason: str = ""
    handle: kv_pb2.KVHandle | None = None
    stamps: Lifetime = field(default_factory=Lifetime)
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # of the first token, when asked
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # of prompt tokens 1.., when asked


class PrefillCore:
    def __init__(self, engine: AsyncEngine, kv: KVXferClient, instance_id: str, lease_ttl_s: float,
                 max_pending: int, pull_timeout_s: float, shards: Sequence[kv_pb2.KVShard] = ()) -> None:
        self.engine = engine
        self.shards = list(shards)  # a TP/PP instance's rank pools, written into every handle
        # A pull in flight holds its lease past expiry: free by our own clock only well after that.
        self.leases = LeaseKeeper(kv, instance_id, self.free_leased, grace_s=pull_timeout_s + 5)
        self.instance_id = instance_id
        self.lease_ttl_s = lease_ttl_s
        self.admission = Admission(max_pending, "prefill")
        self._holder: dict[int, str] = {}  # first held block → request id (a lease names its blocks)
        self._keeper: asyncio.Task | None = None

    def start(self) -> None:
        self._keeper = asyncio.create_task(self.leases.run())

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()

    def free_leased(self, block_ids: list[int]) -> None:
        """The LeaseKeeper's callback: a lease ended (pulled, released, expired), so its request's blocks go back."""
        request_id = self._holder.pop(block_ids[0])
        self.engine.release(request_id)

    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams, pulls: int = 1) -> PrefillResult:
        self.engine.validate(prompt_ids, params)
        stamps = Lifetime(prefill_queued=time.time())
        with self.admission.slot():
            async for out in self.engine.generate(request_id, prompt_ids, params):
                last = out
        stamps.prefill_start, stamps.prefill_end = last.step_start, last.step_end
        if last.finished:
            return PrefillResult(last.new_token_ids[0], last.finish_reason.value, None, stamps, last.logprobs,
                                 last.prompt_logprobs)
        self._holder[last.held_blocks[0]] = request_id
        try:
            handle = await self.leases.create_lease(last.held_blocks, len(prompt_ids), self.lease_ttl_s, pulls)
        except BaseException as exc:
            self._holder.pop(last.held_blocks[0], None)
            self.engine.release(request_id)
            if isinstance(exc, grpc.aio.AioRpcError):  # kvxfer away or restarted: retryable, not this request's fault
                raise Unavailable(f"KV transfer service: {exc.code().name}") from exc
            raise
        handle.shards.extend(self.shards)
        return PrefillResult(last.new_token_ids[0], "", handle, stamps, last.logprobs, last.prompt_logprobs)
