"""The engine as seen from an asyncio service: awaitable commands and per-request output streams. It is the
engine's interface to the instance roles (prefill, decode, colocated): they import nothing else of the engine
(an import contract in pyproject.toml) and reach the LLMEngine only through it.

The engine itself runs on an EngineThread thread; outputs come back through `call_soon_threadsafe`.
A stream that ends early (client gone, deadline, error) aborts its request, which frees its blocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from services.common.errors import EngineFailed, RequestFailed
from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.pool_site import PoolSite
from services.common.sampling import FinishReason, SamplingParams
from services.engine.block_queue import BlockQueue
from services.engine.engine import LLMEngine, StepOutput, fork_id
from services.engine.engine_thread import EngineThread
from services.engine.kv_tables import CachedPrefix, Tables
from services.engine.parallel.pools import pool_sites
from services.engine.step_log import EngineStats

__all__ = ["AsyncEngine", "StepOutput", "fork_id"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class AsyncEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._loop = asyncio.get_running_loop()
        self._streams: dict[str, asyncio.Queue[StepOutput | BaseException]] = {}
        self._reservations = BlockQueue(engine.blocks.try_allocate, engine.free_blocks)  # decode's pulls, FCFS
        self.thread = EngineThread(engine, lambda outs: self._loop.call_soon_threadsafe(self._dispatch, outs),
                                   lambda exc: self._loop.call_soon_threadsafe(self._fail_streams, exc))
        self.thread.start()

    async def call(self, fn: Callable[[LLMEngine], T]) -> T:
        """Runs `fn(engine)` on the engine thread between steps."""
        return await asyncio.wrap_future(self.thread.call(fn))

    def _dispatch(self, outputs: list[StepOutput]) -> None:
        for out in outputs:
            queue = self._streams.get(out.request_id)
            if queue is not None:
                queue.put_nowait(out)
        if self._reservations and any(out.finished for out in outputs):
            self._reservations.grant()

    def _fail_streams(self, exc: BaseException) -> None:
        for queue in self._streams.values():
            queue.put_nowait(exc)

    @property
    def failed(self) -> bool:
        return self.thread.error is not None

    async def _stream(self, request_ids: list[str], admit: Callable[[LLMEngine], object]) -> AsyncIterator[StepOutput]:
        """The outputs of `request_ids` (a request's choices) until each one ended."""
        queue: asyncio.Queue[StepOutput | BaseException] = asyncio.Queue()
        self._streams.update(dict.fromkeys(request_ids, queue))
        running = set(request_ids)
        try:
            await self.call(admit)
            while running:
                out = await queue.get()
                if isinstance(out, BaseException):
                    raise EngineFailed(f"engine failed: {out!r}") from out
                if out.error:
                    running.discard(out.request_id)  # the engine dropped it already
                    raise RequestFailed(out.error)
                if out.finished or out.prefilled:
                    running.discard(out.request_id)
                yield out
        finally:
            for request_id in request_ids:
                self._streams.pop(request_id, None)
            if running:
                # Fire and forget: the abort is queued to the engine thread even if this task is cancelled; the
                # blocks it frees then go to the requests waiting for some.
                left = sorted(running)
                self.thread.call(lambda e: [e.abort(r) for r in left]).add_done_callback(
                    lambda _: self._loop.call_soon_threadsafe(self._reservations.grant))

    async def end(self, request_id: str) -> bool:
        """Ends one choice of a running stream early (its client has its text); its blocks go back and its stream
        gets an ABORT output. False if the engine does not hold it."""
        ended = await self.call(lambda e: e.abort(request_id))
        if ended and (queue := self._streams.get(request_id)) is not None:
            queue.put_nowait(StepOutput(request_id, [], FinishReason.ABORT))
            self._reservations.grant()
        return ended

    @property
    def steps(self) -> int:
        """Steps run since the start."""
        return self.thread.steps

    def busy(self) -> bool:
        """Whether sequences are waiting or running (read off the engine thread: a hint, not a snapshot)."""
        return self.engine.has_work()

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self.engine.blocks.block_size

    @property
    def layout(self) -> KVLayout:
        """The KV pool's layout (rank 0's, for a TP/PP instance)."""
        return self.engine.layout

    @property
    def groups(self) -> KVGroups:
        """The model's layer groups: which blocks a sequence keeps (services/common/kv_groups.py)."""
        return self.engine.groups

    def pool_sites(self) -> list[PoolSite]:
        """Every rank's KV pool, indexed by rank: what kvxfer maps and a handle names (services/common/pool_site.py)."""
        return pool_sites(self.engine)

    def hold_cached(self, prompt_ids: list[int], cache_namespace: str, num_tokens: int,
                    keep_tokens: int | None = None) -> CachedPrefix:
        """Holds the prompt's longest cached prefix within its first `num_tokens` tokens (LLMEngine.hold_cached)."""
        return self.engine.hold_cached(prompt_ids, cache_namespace, num_tokens, keep_tokens)

    def vouched(self, prompt_ids: list[int], cache_namespace: str, carried: list[int]) -> bool:
        """Whether a KV handle's hashes are this prompt's own (LLMEngine.vouched)."""
        return self.engine.vouched(prompt_ids, cache_namespace, carried)

    def cache_prefix(self, tables: Tables, hashes: list[int]) -> None:
        """Registers held blocks pulled from another instance under their vouched hashes (LLMEngine.cache_prefix)."""
        self.engine.cache_prefix(tables, hashes)

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raises EngineInputError naming the field when the request cannot be served (reads only the config)."""
        self.engine.validate(prompt_ids, params)

    async def stats(self, steps_since: float | None = None) -> EngineStats:
        """A snapshot of the engine between steps (see LLMEngine.stats)."""
        return await self.call(lambda e: e.stats(self.thread.steps, steps_since))

    def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                 n: int = 1, cache_namespace: str = "") -> AsyncIterator[StepOutput]:
        """Streams a new request's outputs (prefill policy: one output, with the K/V held); n > 1: those of its
        choices, which share one prefill (`LLMEngine.add_request`), told apart by request id (`fork_id`)."""
        ids = [request_id, *(fork_id(request_id, i) for i in range(1, n))]
        return self._stream(ids, lambda e: e.add_request(request_id, prompt_ids, params, n, cache_namespace))

    def continue_prefilled(self, request_id: str, prompt_ids: list[int], first_token: int | None, params: SamplingParams,
                           block_ids: list[int], cache_namespace: str = "",
                           carried: list[int] | None = None) -> AsyncIterator[StepOutput]:
        """Decode: streams a request whose prompt K/V already sits in `block_ids` (`carried`: its handle's hashes)."""
        return self._stream([request_id], lambda e: e.add_prefilled(request_id, prompt_ids, first_token, params, block_ids,
                                                                    cache_namespace, carried))

    async def reserve_blocks(self, num_tokens: int) -> list[int]:
        """Waits (FCFS, `BlockQueue`) until the pool can hold what a sequence of `num_tokens` tokens keeps and
        returns the reserved blocks. The allocator is thread-safe, so this does not wait for the engine's step."""
        return await self._reservations.reserve(self.engine.groups.num_kept(num_tokens))

    def try_reserve(self, num_blocks: int) -> list[int] | None:
        """`num_blocks` blocks now, or None when the pool cannot give them or earlier reservations wait."""
        return self._reservations.try_reserve(num_blocks)

    def release(self, request_id: str) -> None:
        """Prefill: the held K/V of `request_id` was pulled or its lease ended; its blocks go back (queued)."""
        self.thread.call(lambda e: e.release_prefilled(request_id))

    def free_blocks(self, block_ids: list[int]) -> None:
        """Returns reserved blocks to the pool at once and grants what waits for them."""
        self.engine.free_blocks(block_ids)
        self._reservations.grant()

    def stop(self) -> None:
        self.thread.stop()
