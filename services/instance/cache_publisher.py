"""Keeps an instance's entry in the prefix-cache index (`services/common/registry_cache.py`) true: at every beat
the block manager's events since the last one, as the next numbered batch; the whole set when a batch is
refused (the index lost one, Redis or the instance restarted), when the block manager dropped events, and
every RESYNC_S."""

from __future__ import annotations

import time

from services.common.registry_cache import CacheIndex
from services.engine.block_manager import BlockManager, CacheEvent

RESYNC_S = 30.0


class CachePublisher:
    def __init__(self, blocks: BlockManager, index: CacheIndex, instance_id: str, incarnation: str) -> None:
        self.blocks = blocks
        self.index = index
        self.instance_id = instance_id
        self.incarnation = incarnation
        self._number = 0
        self._synced_at: float | None = None  # monotonic; None: the index must be rewritten

    async def beat(self) -> None:
        """Publishes what changed (a failure leaves the next beat to resync)."""
        if not self.blocks.caching:
            return
        events = self.blocks.take_events()
        due = self._synced_at is None or time.monotonic() - self._synced_at > RESYNC_S
        self._number += 1
        try:
            if events is not None and not due:
                stored, removed = _net(events)
                if await self.index.apply(self.instance_id, self.incarnation, self._number, stored, removed):
                    return
            self._synced_at = time.monotonic()
            await self.index.resync(self.instance_id, self.incarnation, self._number, self.blocks.cached_hashes())
        except BaseException:
            self._synced_at = None
            raise


def _net(events: list[CacheEvent]) -> tuple[list[int], list[int]]:
    """The hashes stored and removed by a run of events: each hash's last event decides."""
    last = {h: stored for stored, h in events}
    return [h for h, s in last.items() if s], [h for h, s in last.items() if not s]
