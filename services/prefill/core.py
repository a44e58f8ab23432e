"""The prefill instance's logic: admit, run to the first token, lease the K/V, free it when the lease ends."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from distserve.v1 import kv_pb2
from services.common.errors import Overloaded
from services.common.kv_transfer import KVTransfer
from services.common.stamps import Lifetime
from services.engine.async_engine import AsyncEngine
from services.engine.sequence import SamplingParams

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PrefillResult:
    first_token: int
    finish_reason: str = ""
    handle: kv_pb2.KVHandle | None = None
    stamps: Lifetime = field(default_factory=Lifetime)


class PrefillCore:
    def __init__(self, engine: AsyncEngine, kv: KVTransfer, instance_id: str, lease_ttl_s: float, max_pending: int) -> None:
        self.engine = engine
        self.kv = kv
        self.instance_id = instance_id
        self.lease_ttl_s = lease_ttl_s
        self.max_pending = max_pending
        self.pending = 0
        self._lease_owner: dict[str, str] = {}  # lease id → request id
        self._watch: asyncio.Task | None = None

    def start(self) -> None:
        self._watch = asyncio.create_task(self._watch_leases())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> PrefillResult:
        self.engine.engine.validate(prompt_ids, params)  # reads config only: safe off the engine thread
        if self.pending >= self.max_pending:
            raise Overloaded(f"prefill queue full ({self.pending} requests)")
        stamps = Lifetime(prefill_queued=time.time())
        self.pending += 1
        try:
            async for out in self.engine.generate(request_id, prompt_ids, params):
                last = out
        finally:
            self.pending -= 1
        stamps.prefill_start, stamps.prefill_end = last.step_start, last.step_end
        if last.finished:
            return PrefillResult(last.new_token_ids[0], last.finish_reason.value, None, stamps)
        try:
            handle = await self.kv.create_lease(self.instance_id, last.held_blocks, len(prompt_ids), self.lease_ttl_s)
        except BaseException:
            await self.engine.call(lambda e: e.release_prefilled(request_id))
            raise
        self._lease_owner[handle.lease_id] = request_id
        return PrefillResult(last.new_token_ids[0], "", handle, stamps)

    async def _watch_leases(self) -> None:
        """Frees a request's blocks when kvxfer says its lease ended (pulled, released or expired)."""
        while True:
            try:
                async for ended in self.kv.lease_events(self.instance_id):
                    request_id = self._lease_owner.pop(ended.lease_id, None)
                    if request_id is not None:
                        await self.engine.call(lambda e, r=request_id: e.release_prefilled(r))
                        log.debug("lease %s of %s %s", ended.lease_id, request_id, ended.reason)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lease event stream broke (%s); reconnecting", exc)
                await asyncio.sleep(0.5)
