"""Keeps an instance's KV pools (one per TP/PP rank) registered with a kvxfer across kvxfer restarts (one keeper
per kvxfer serving them: rank 0's host's, and that of each other node its ranks run on).

A kvxfer that comes back knows no pool. The keeper asks kvxfer for its counters each heartbeat and
registers the pools again when kvxfer was unreachable since the last look, holds no pool at all, or its
counters went back (a new process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.kvxfer.api import KVXferClient

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PoolKeeper:
    kv: KVXferClient
    instance_id: str
    register: Callable[[], Awaitable[None]]  # registers every pool of the instance this kvxfer serves
    timeout_s: float = 2.0
    reachable: bool = True
    _counted: int = 0

    async def check(self) -> bool:
        """Whether kvxfer has this pool now (registering it again when needed)."""
        try:
            stats = await asyncio.wait_for(self.kv.stats(), self.timeout_s)
            counted = stats.pulls_ok + stats.pulls_failed + stats.leases_released + stats.leases_expired
            if not self.reachable or stats.pools == 0 or counted < self._counted:
                await asyncio.wait_for(self.register(), self.timeout_s)
                log.warning("kvxfer at %s came back: registered the pools of %s again", self.kv.address, self.instance_id)
                counted = 0
        except Exception as exc:
            if self.reachable:
                log.warning("kvxfer at %s unreachable: %r", self.kv.address, exc)
            self.reachable = False
            return False
        self._counted, self.reachable = counted, True
        return True
