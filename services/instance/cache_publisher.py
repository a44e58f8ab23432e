"""Keeps an instance's entry in the prefix-cache index (`services/common/registry_cache.py`) true: at every beat
the block manager's events since the last one, as the next numbered batch (nothing new: the keys renewed); the
whole set only when a batch is refused (the index lost one, Redis or the instance restarted) or the block manager
dropped events."""

from __future__ import annotations

from services.common.registry_cache import CacheIndex
from services.engine.block_manager import BlockManager, CacheEvent


class CachePublisher:
    def __init__(self, blocks: BlockManager, index: CacheIndex, instance_id: str, incarnation: str) -> None:
        self.blocks = blocks
        self.index = index
        self.instance_id = instance_id
        self.incarnation = incarnation
        self._number = 0  # of the last batch applied
        self._synced = False  # False: the index must be rewritten

    async def beat(self) -> None:
        """Publishes what changed (a failure leaves the next beat to resync)."""
        if not self.blocks.caching:
            return
        events = self.blocks.take_events()
        number = self._number + 1
        try:
            if events is not None and self._synced:
                stored, removed = _net(events)
                applied = await self.index.apply(self.instance_id, self.incarnation, number, stored, removed)
                if applied:
                    self._number = number if applied == 1 else self._number
                    return
            self._synced = True
            await self.index.resync(self.instance_id, self.incarnation, number, self.blocks.cached_hashes())
            self._number = number
        except BaseException:
            self._synced = False
            raise


def _net(events: list[CacheEvent]) -> tuple[list[int], list[int]]:
    """The hashes stored and removed by a run of events: each hash's last event decides."""
    last = {h: stored for stored, h in events}
    return [h for h, s in last.items() if s], [h for h, s in last.items() if not s]
