"""Cleanup that a cancelled request cannot interrupt: a lease release, an unbooking of load.

The HTTP server cancels a request's task when its client goes away, and that cancellation reaches every
later await in the request's `finally` blocks too. So each cleanup runs as its own task, which the request
waits for shielded; the task ends within `timeout_s` whatever happens to the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class Cleanups:
    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, step: Awaitable[None]) -> None:
        """Runs `step` to its end (or its bound); a cancelled caller stops waiting, the step goes on."""
        await asyncio.shield(self._track(self._bounded(step)))

    async def claim(self, acquire: Awaitable[T], undo: Callable[[T], Awaitable[None]]) -> T:
        """Awaits `acquire` (which books or leases something); a caller cancelled meanwhile stops waiting, and
        what `acquire` then brings is undone, so nothing it took outlives the request."""
        task = asyncio.ensure_future(acquire)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                self._track(self._undo_when_done(task, undo))
            raise

    async def _undo_when_done(self, task: asyncio.Future[T], undo: Callable[[T], Awaitable[None]]) -> None:
        try:
            value = await task
        except Exception:  # it took nothing
            return
        await self._bounded(undo(value))

    def _track(self, step: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(step)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _bounded(self, step: Awaitable[None]) -> None:
        try:
            await asyncio.wait_for(step, self.timeout_s)
        except Exception as exc:  # the step's own errors are logged where they are known; this is the bound
            log.warning("cleanup did not finish: %r", exc)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        """Waits for every cleanup started so far (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
