"""Lease ends kept for instances that nobody watches, until a watcher comes: at most a cap per instance.

Past the cap the oldest end goes. Dropping is safe: a worker that never hears of a lease's end frees its
blocks at expiry + grace by its own clock (LeaseKeeper), so a dropped end costs blocks held a while longer,
never blocks freed under a pull."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from services.kvxfer.leases import LeaseEnd

BACKLOG_ENDS = 10_000  # per instance: minutes of lease ends at a busy worker's rate, a few MB at most


@dataclass(slots=True)
class LeaseBacklog:
    cap: int = BACKLOG_ENDS
    ends: dict[str, deque[LeaseEnd]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # per instance, since its backlog was last taken

    def add(self, end: LeaseEnd) -> LeaseEnd | None:
        """Keep end; return the instance's oldest end if the cap dropped it."""
        kept = self.ends.setdefault(end.instance_id, deque())
        kept.append(end)
        if len(kept) <= self.cap:
            return None
        self.dropped[end.instance_id] = self.dropped.get(end.instance_id, 0) + 1
        return kept.popleft()

    def take(self, instance_id: str) -> list[LeaseEnd]:
        """The instance's kept ends, oldest first; the backlog forgets them."""
        self.dropped.pop(instance_id, None)
        return list(self.ends.pop(instance_id, ()))
