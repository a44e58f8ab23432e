"""A request's n choices: one prefill shared by their decodes (disagg), one colocated call shared by them, and
their streams merged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TypeVar

from distserve.v1 import kv_pb2, worker_pb2

T = TypeVar("T")


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


class SharedStream:
    """One colocated call that streams the n choices' chunks (TokenChunk.index); each choice reads its own.

    The first choice to read opens it; it is closed (the instance aborts what still runs) once every choice is
    done reading, and a failure of the call ends every choice that still reads. A choice that the router stops
    before its end (a stop string: `stop(index)`) while others read on is ended on the instance with `end(index)`;
    choices that merely stop reading (the client left) end with the call."""

    def __init__(self, n: int, open_call: Callable[[], AsyncIterator[worker_pb2.TokenChunk]],
                 end: Callable[[int], Awaitable[None]]) -> None:
        self._open = open_call
        self._end = end
        self._queues: list[asyncio.Queue[worker_pb2.TokenChunk | BaseException | None]] = [asyncio.Queue() for _ in range(n)]
        self._readers = n
        self._task: asyncio.Task | None = None

    async def _pump(self) -> None:
        try:
            async with aclosing(self._open()) as call:
                async for chunk in call:
                    self._queues[chunk.index].put_nowait(chunk)
        except Exception as exc:
            for queue in self._queues:
                queue.put_nowait(exc)
        for queue in self._queues:
            queue.put_nowait(None)  # the call ended: a choice that did not end with it ends now

    async def choice(self, index: int) -> AsyncIterator[worker_pb2.TokenChunk]:
        if self._task is None:
            self._task = asyncio.create_task(self._pump())
        try:
            while (chunk := await self._queues[index].get()) is not None:
                if isinstance(chunk, BaseException):
                    raise chunk
                yield chunk
                if chunk.finish_reason:
                    return
        finally:
            self._readers -= 1
            if not self._readers:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)

    async def stop(self, index: int) -> None:
        """Choice `index` ends before the instance ended it; called while it still counts as a reader."""
        if self._readers > 1:  # the last reader closes the call instead
            await self._end(index)


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
