"""Which instance holds which KV blocks, in the router's memory: the prefix-cache index that the instances publish
through Redis (`services/common/registry_cache.py`), applied batch by batch as the stream carries them.

A lookup costs the prompt's blocks times the instances holding them, not the live instances. An instance whose
batches the router missed (it started, fell behind the capped stream, or an instance restarted) keeps what it held
and is `stale` until its whole set is read again (`load`); its later batches wait for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.registry_cache import Batch, HeldSet


@dataclass(slots=True)
class _Entry:
    incarnation: str = ""
    number: int = 0
    hashes: set[int] = field(default_factory=set)
    stale: bool = True  # its set must be read again before a batch applies


class BlockIndex:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._holders: dict[int, set[str]] = {}  # block hash → the instances holding it

    def held_prefix(self, instance_ids: list[str], hashes: list[int]) -> dict[str, int]:
        """For each instance, how many of the leading `hashes` (a prompt's full blocks, in order) it holds."""
        counts = dict.fromkeys(instance_ids, 0)
        holding = set(instance_ids)
        for n, h in enumerate(hashes, 1):
            holding &= self._holders.get(h, set())
            if not holding:
                break
            for instance_id in holding:
                counts[instance_id] = n
        return counts

    def apply(self, batch: Batch) -> None:
        """One batch from the stream; one that does not follow the last applied makes the instance stale."""
        entry = self._entries.setdefault(batch.instance_id, _Entry())
        if batch.whole:
            self._replace(batch.instance_id, entry, batch.incarnation, batch.number, batch.added)
            return
        same = entry.incarnation == batch.incarnation
        if entry.stale or (same and batch.number <= entry.number):  # waits for its set, or the set has it already
            return
        if not same or batch.number != entry.number + 1:
            entry.stale = True
            return
        for h in batch.removed:
            self._unhold(batch.instance_id, entry, h)
        for h in batch.added:
            entry.hashes.add(h)
            self._holders.setdefault(h, set()).add(batch.instance_id)
        entry.number = batch.number

    def load(self, instance_id: str, held: HeldSet) -> None:
        """The instance's whole set as Redis held it; ignored where batches applied since make it older."""
        entry = self._entries.setdefault(instance_id, _Entry())
        if not entry.stale and entry.incarnation == held.incarnation and entry.number >= held.number:
            return
        self._replace(instance_id, entry, held.incarnation, held.number, held.hashes)
        entry.stale = not held.incarnation  # no set there yet: its first (whole) batch brings it

    def stale(self, instance_ids: list[str]) -> list[str]:
        """Of these, the instances whose set must be read (unknown, or a batch missed)."""
        return [i for i in instance_ids if i not in self._entries or self._entries[i].stale]

    def retain(self, instance_ids: set[str]) -> None:
        """Forgets the instances not among `instance_ids` (their registration lapsed)."""
        for instance_id in [i for i in self._entries if i not in instance_ids]:
            entry = self._entries.pop(instance_id)
            for h in list(entry.hashes):
                self._unhold(instance_id, entry, h)

    def mark_all_stale(self) -> None:
        """Every set must be read again (Redis was away: batches may have been lost with it)."""
        for entry in self._entries.values():
            entry.stale = True

    @property
    def entries(self) -> int:
        """(instance, block) pairs held: what the index's memory grows with."""
        return sum(len(e.hashes) for e in self._entries.values())

    def _replace(self, instance_id: str, entry: _Entry, incarnation: str, number: int, hashes: list[int]) -> None:
        for h in list(entry.hashes):
            self._unhold(instance_id, entry, h)
        for h in hashes:
            entry.hashes.add(h)
            self._holders.setdefault(h, set()).add(instance_id)
        entry.incarnation, entry.number, entry.stale = incarnation, number, False

    def _unhold(self, instance_id: str, entry: _Entry, h: int) -> None:
        entry.hashes.discard(h)
        holders = self._holders.get(h)
        if holders is not None:
            holders.discard(instance_id)
            if not holders:
                del self._holders[h]
