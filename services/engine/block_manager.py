"""Hands out KV blocks of a fixed-size pool: plain integers, no tensors.

A block may be shared (the n samples of one prompt hold its K/V once; requests with a common prefix hold its
cached blocks): it counts its holders. A full block can be registered under its content hash
(services/common/prefix_hash.py) and its layer group (services/common/kv_groups.py: each group keeps its own
blocks of a prefix); when its last holder lets go it stays cached, found by `match`, until the pool needs it and
evicts it, least recently released first. A block with a holder (a sequence, a kvxfer lease) is never
evicted.

Thread-safe: the engine thread grows and frees sequences' blocks while a decode instance's event loop reserves
blocks for pulls without waiting for the step to end.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from itertools import takewhile


@dataclass(slots=True)
class CacheCounters:
    """Prompt tokens looked up in the prefix cache and tokens found there, since the start."""

    queried: int = 0
    hit: int = 0


MAX_EVENTS = 1 << 16  # kept between two takes; past it the index resyncs
CacheEvent = tuple[bool, int]  # (stored: True, evicted: False), the block's content hash
CacheKey = tuple[int, int]  # (layer group, content hash); only group 0's are told to an index of the pool


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self._free: deque[int] = deque(range(num_blocks))  # hold nothing: neither holders nor cached content
        self._refs: dict[int, int] = {}  # allocated block → its holders
        self._cached: OrderedDict[int, None] = OrderedDict()  # cached blocks without holders, least recent first
        self._key_of: dict[int, CacheKey] = {}  # registered block → its group and content hash
        self._by_key: dict[CacheKey, int] = {}
        self._events: list[CacheEvent] | None = []  # None: more than MAX_EVENTS since the last take
        self._lock = threading.RLock()

    @property
    def num_free(self) -> int:
        """Blocks an allocation can take: never used, or cached without holders (evicted on demand)."""
        return len(self._free) + len(self._cached)

    @property
    def num_used(self) -> int:
        return len(self._refs)

    @property
    def num_cached(self) -> int:
        """Cached blocks that no one holds."""
        return len(self._cached)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def try_allocate(self, num_blocks: int) -> list[int] | None:
        """Takes `num_blocks` free blocks (evicting cached ones when it must), or none when fewer are free."""
        with self._lock:
            if num_blocks > len(self._free) + len(self._cached):
                return None
            blocks = [self._take() for _ in range(num_blocks)]
            self._refs.update(dict.fromkeys(blocks, 1))
            return blocks

    def allocate(self, num_blocks: int) -> list[int]:
        """Takes `num_blocks` free blocks, or raises MemoryError taking none."""
        blocks = self.try_allocate(num_blocks)
        if blocks is None:
            raise MemoryError(f"need {num_blocks} KV blocks, {self.num_free} free")
        return blocks

    def share(self, blocks: list[int]) -> None:
        """One more holder of each of these allocated blocks (a fork of a sequence)."""
        with self._lock:
            self._check(blocks)
            for b in blocks:
                self._refs[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drops one holder of each block; a block without holders stays cached if registered, else goes back.
        Frees none if any is not allocated. `blocks` are taken as a sequence's, in order: its last ones are evicted
        first, so that a prefix outlives its extensions."""
        with self._lock:
            self._check(blocks)
            for b in reversed(blocks):
                self._refs[b] -= 1
                if not self._refs[b]:
                    del self._refs[b]
                    if b in self._key_of:
                        self._cached[b] = None
                    else:
                        self._free.append(b)

    def locked(self) -> threading.RLock:
        """Held around several calls that must see one state (a lookup, then holding what it found)."""
        return self._lock

    def cached(self, keys: list[CacheKey]) -> list[bool]:
        """Whether each key's block is cached now (holds nothing)."""
        with self._lock:
            return [k in self._by_key for k in keys]

    def hold(self, keys: list[CacheKey]) -> list[int]:
        """Holds and returns the cached blocks of these keys, each one `cached`; the caller frees them like
        allocated ones."""
        with self._lock:
            blocks = [self._by_key[k] for k in keys]
            for b in blocks:
                if b in self._cached:
                    del self._cached[b]
                self._refs[b] = self._refs.get(b, 0) + 1
            return blocks

    def match(self, hashes: list[int]) -> list[int]:
        """Holds and returns group 0's cached blocks of the longest prefix of `hashes`."""
        with self._lock:
            return self.hold(list(takewhile(self._by_key.__contains__, ((0, h) for h in hashes))))

    def register(self, block: int, content_hash: int, group: int = 0) -> None:
        """Records that held `block` is full and holds the content `content_hash` addresses in layer group
        `group`. A second block of the same content stays unregistered (it goes back to the pool when freed)."""
        with self._lock:
            key = (group, content_hash)
            if not self.caching or key in self._by_key or block in self._key_of:
                return
            self._check([block])
            self._key_of[block] = key
            self._by_key[key] = block
            if not group:
                self._record(True, content_hash)

    def cached_hashes(self) -> list[int]:
        """The content hashes of group 0's registered blocks, held or not (what an index of this pool lists)."""
        with self._lock:
            return [h for g, h in self._by_key if not g]

    def take_events(self) -> list[CacheEvent] | None:
        """The hashes registered and evicted since the last call, in order (an index of this pool applies them);
        None when there were too many to keep: the index resyncs from `cached_hashes`."""
        with self._lock:
            events, self._events = self._events, []
            return events

    def _record(self, stored: bool, content_hash: int) -> None:
        if self._events is not None:
            self._events.append((stored, content_hash))
            if len(self._events) > MAX_EVENTS:
                self._events = None

    def _take(self) -> int:
        if self._free:
            return self._free.popleft()
        b, _ = self._cached.popitem(last=False)
        group, evicted = self._key_of.pop(b)
        del self._by_key[(group, evicted)]
        if not group:
            self._record(False, evicted)
        return b

    def _check(self, blocks: list[int]) -> None:
        stray = [b for b in blocks if b not in self._refs]
        if stray:
            raise ValueError(f"block {stray[0]} is not allocated")
