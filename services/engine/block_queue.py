"""Reservations of KV blocks, first come first served: the one queue behind a decode instance's pulls (the engine's
`AsyncEngine` and the mock instances alike).

A reservation waits behind every earlier one, even where the pool could give it its blocks now, so a large
request is not starved by small ones. Whoever frees blocks calls `grant`; a reservation cancelled while it waits
leaves the queue (the next one may fit now), and one granted just as it was cancelled gives its blocks back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class BlockQueue:
    def __init__(self, take: Callable[[int], list[int] | None], give_back: Callable[[list[int]], None]) -> None:
        """`take(amount)`: the pool's blocks for that amount now, or None; `give_back(blocks)`: into the pool."""
        self._take, self._give_back = take, give_back
        self._waiters: deque[tuple[int, asyncio.Future[list[int]]]] = deque()

    def __bool__(self) -> bool:
        """Whether reservations wait."""
        return bool(self._waiters)

    async def reserve(self, amount: int) -> list[int]:
        """Waits for its turn and the blocks for `amount`."""
        waiter = (amount, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self.grant()
        try:
            return await waiter[1]
        except asyncio.CancelledError:
            future = waiter[1]
            if future.done() and not future.cancelled():  # granted just as the cancel came
                self._give_back(future.result())
                self.grant()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
                self.grant()
            raise

    def try_reserve(self, amount: int) -> list[int] | None:
        """The blocks for `amount` now, or None when the pool cannot give them or earlier reservations wait."""
        return None if self._waiters else self._take(amount)

    def grant(self) -> None:
        """Gives the reservations at the head of the queue their blocks, in order, until one does not fit."""
        while self._waiters:
            amount, future = self._waiters[0]
            if future.done():  # cancelled; its task leaves the queue next
                self._waiters.popleft()
                continue
            blocks = self._take(amount)
            if blocks is None:
                return
            self._waiters.popleft()
            future.set_result(blocks)
