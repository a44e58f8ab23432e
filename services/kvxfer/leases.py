"""The lease table: which prefilled blocks are held for a puller, until released or expired.

kvxfer is the lease authority: a lease pinned by an in-flight pull does not expire until the pull
ends, and the worker frees blocks only on the lease's end event, so a pull never reads freed blocks.
"""

from __future__ import annotations

import enum
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

TOMBSTONES = 100_000  # ended leases remembered, so a late pull is told why its lease is gone


class LeaseState(enum.Enum):
    ACTIVE = "active"
    RELEASED = "released"
    EXPIRED = "expired"


class LeaseError(Exception):
    """A lease that cannot be pulled: unknown, released or expired."""

    def __init__(self, lease_id: str, state: LeaseState | None) -> None:
        self.lease_id = lease_id
        self.state = state
        what = "unknown" if state is None else state.value
        super().__init__(f"lease {lease_id} is {what}")


@dataclass(slots=True)
class Lease:
    lease_id: str
    instance_id: str
    block_ids: list[int]
    num_tokens: int
    expiry: float  # the table's clock (unix seconds by default)
    state: LeaseState = LeaseState.ACTIVE
    pins: int = 0  # pulls in flight
    release_pending: bool = False  # released while pinned: ends when the last pull unpins
    # successful pulls before the lease ends (a prefill shared by n decodes: n); a pull that is one of k reading
    # the lease for one destination instance (its pools at k kvxfers) counts 1/k
    pulls_left: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class LeaseEnd:
    """The event a worker waits for before freeing the blocks."""

    lease_id: str
    instance_id: str
    block_ids: list[int]
    state: LeaseState


@dataclass(slots=True)
class LeaseTable:
    clock: Callable[[], float]
    leases: dict[str, Lease] = field(default_factory=dict)
    ended: OrderedDict[str, LeaseState] = field(default_factory=OrderedDict)

    def create(self, instance_id: str, block_ids: list[int], num_tokens: int, ttl_s: float, pulls: int = 1) -> Lease:
        lease = Lease(uuid.uuid4().hex, instance_id, list(block_ids), num_tokens, self.clock() + ttl_s,
                      pulls_left=Fraction(max(1, pulls)))
        self.leases[lease.lease_id] = lease
        return lease

    def get(self, lease_id: str) -> Lease | None:
        """The live lease of that id, if any."""
        return self.leases.get(lease_id)

    def pin(self, lease_id: str) -> Lease:
        """Hold an active, unexpired lease for one pull; raise LeaseError otherwise."""
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseError(lease_id, self.ended.get(lease_id))
        if lease.release_pending:
            raise LeaseError(lease_id, LeaseState.RELEASED)
        if self.clock() >= lease.expiry:
            raise LeaseError(lease_id, LeaseState.EXPIRED)
        lease.pins += 1
        return lease

    def unpin(self, lease_id: str, release: bool, share: int = 1) -> LeaseEnd | None:
        """End one pull of the lease; release it after its last successful pull (`share`: this pull is one of that
        many that together count as one)."""
        lease = self.leases.get(lease_id)
        if lease is None:  # dropped with its unregistered pool while the pull ran
            return None
        lease.pins -= 1
        lease.pulls_left -= Fraction(int(release), max(1, share))
        lease.release_pending |= lease.pulls_left <= 0
        if lease.pins == 0 and lease.release_pending:
            return self._end(lease, LeaseState.RELEASED)
        return None

    def release(self, lease_id: str) -> LeaseEnd | None:
        """Release a lease (e.g. its request was cancelled); deferred while a pull holds it."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.release_pending:
            return None
        lease.release_pending = True
        return self._end(lease, LeaseState.RELEASED) if lease.pins == 0 else None

    def expire(self) -> list[LeaseEnd]:
        """End every unpinned lease past its expiry."""
        now = self.clock()
        due = [lease for lease in self.leases.values() if lease.pins == 0 and now >= lease.expiry]
        return [self._end(lease, LeaseState.EXPIRED) for lease in due]

    def drop_instance(self, instance_id: str) -> int:
        """Forget the leases of an unregistered instance (no events: the worker is gone)."""
        gone = [lease for lease in self.leases.values() if lease.instance_id == instance_id]
        for lease in gone:
            self._end(lease, LeaseState.RELEASED)
        return len(gone)

    def live(self) -> int:
        return len(self.leases)

    def _end(self, lease: Lease, state: LeaseState) -> LeaseEnd:
        lease.state = state
        del self.leases[lease.lease_id]
        self.ended[lease.lease_id] = state
        while len(self.ended) > TOMBSTONES:
            self.ended.popitem(last=False)
        return LeaseEnd(lease.lease_id, lease.instance_id, lease.block_ids, state)
