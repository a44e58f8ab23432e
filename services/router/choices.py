"""A request's n choices: their seeds, one prefill shared by their decodes, and their streams merged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TypeVar

from distserve.v1 import kv_pb2, worker_pb2

T = TypeVar("T")
_GOLDEN = 0x9E3779B97F4A7C15  # spreads the choices' seeds over the whole range


def choice_seed(seed: int, index: int) -> int:
    """Choice 0 keeps the request's seed (n=1 is unchanged); the others get distinct seeds derived from it."""
    if index == 0:
        return seed
    return (seed + index * _GOLDEN + 2**63) % 2**64 - 2**63  # stays an int64


class SharedPrefill:
    """One prefill whose K/V lease the n choices' decodes all pull; each decode samples its own first token.

    The first choice to ask runs it; the lease ends after n pulls, or is released once every choice is done
    with it (one may have failed or been cancelled before pulling)."""

    def __init__(self, n: int, run: Callable[[], Awaitable[worker_pb2.PrefillResponse]],
                 release: Callable[[kv_pb2.KVHandle], Awaitable[None]] | None) -> None:
        self._run = run
        self._release = release
        self._left = n
        self._task: asyncio.Future[worker_pb2.PrefillResponse] | None = None

    async def get(self) -> worker_pb2.PrefillResponse:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return await asyncio.shield(self._task)

    async def done(self) -> None:
        """A choice is done with the lease (pulled, failed or cancelled); the last one releases it."""
        self._left -= 1
        if self._left > 0 or self._task is None or self._release is None:
            return
        try:
            response = await self._task
        except Exception:
            return  # no prefill, no lease
        if not response.finish_reason:
            await self._release(response.kv)


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """Items of all streams as they come; the first error ends them all; closing this closes every stream."""
    if len(streams) == 1:
        async with aclosing(streams[0]) as only:
            async for item in only:
                yield item
        return
    queue: asyncio.Queue[tuple[T | None, asyncio.Task | None]] = asyncio.Queue()

    async def pump(stream: AsyncIterator[T]) -> None:
        async with aclosing(stream):
            async for item in stream:
                queue.put_nowait((item, None))

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    for task in tasks:
        task.add_done_callback(lambda t: queue.put_nowait((None, t)))
    try:
        for _ in tasks:
            while True:
                item, ended = await queue.get()
                if ended is None:
                    yield item
                    continue
                if not ended.cancelled() and ended.exception() is not None:
                    raise ended.exception()
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
