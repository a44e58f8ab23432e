"""Keeps the router's prefix-cache index (`block_index.py`) current from Redis: on a request's path one read of the
batches published since the last (shared by the requests that arrive while it is under way); in the background,
the whole sets of the instances it is missing, and the instances gone forgotten."""

from __future__ import annotations

import asyncio

from prometheus_client import Gauge

from services.common.registry_cache import CacheIndex
from services.router.block_index import BlockIndex

ENTRIES = Gauge("distserve_router_index_entries", "(instance, block) pairs in the router's prefix-cache index")
PAGE = 1024  # batches read per round trip in the background
HOT_PAGE = 64  # ... and on a request's path: a burst of batches (every instance resyncing after a Redis restart)
# costs the request that meets it no more than this; the background reads the rest
HOT_WAIT_S = 0.25  # the longest a request waits for the index to be brought up to date (else: routed by load)


class IndexFeed:
    def __init__(self) -> None:
        self.index = BlockIndex()
        self.cursor = "0"  # stream id of the last batch read
        self._reading: asyncio.Future | None = None

    async def catch_up(self, cache: CacheIndex, page: int = HOT_PAGE, wait_s: float | None = HOT_WAIT_S) -> int:
        """Applies up to `page` batches published since the last read, in one round trip (joining a read under
        way); returns how many that read found. TimeoutError after `wait_s` (a stalled Redis): the read goes on."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read(cache, page))
            self._reading.add_done_callback(self._read_done)
        return await asyncio.wait_for(asyncio.shield(self._reading), wait_s)

    async def refresh(self, cache: CacheIndex, live: list[str]) -> None:
        """Forgets the instances not in `live`, reads the sets of those it lacks or missed a batch of, and reads
        on to the stream's end."""
        self.index.retain(set(live))
        stale = self.index.stale(live)
        if stale:
            if self.cursor == "0":  # nothing read yet: the sets hold what the stream held before them
                self.cursor = await cache.last_batch_id()
            for instance_id, held in (await cache.held_sets(stale)).items():
                self.index.load(instance_id, held)
        while await self.catch_up(cache, PAGE, None) == PAGE:
            pass
        ENTRIES.set(self.index.entries)

    async def _read(self, cache: CacheIndex, page: int) -> int:
        self.cursor, batches = await cache.batches(self.cursor, page)
        for batch in batches:
            self.index.apply(batch)
        return len(batches)

    def _read_done(self, future: asyncio.Future) -> None:
        self._reading = None
        if not future.cancelled():
            future.exception()  # retrieved: every caller awaiting it got it raised
