"""A sequence's block tables, one per layer group (services/common/kv_groups.py), kept in one BlockManager.

Every table of a sequence has the same length (blocks_for of its tokens); a sliding group's blocks out of the
window are freed as the sequence advances (`trim`) and read NULL_BLOCK. Prefix-cache hits count only where every
group has what a sequence keeps: all blocks of the prefix in a full group, those in the window in a sliding one.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.kv_groups import NULL_BLOCK, KVGroups
from services.engine.block_manager import BlockManager

Tables = list[list[int]]  # [group][block index] → block id, NULL_BLOCK where none is kept


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    """The held blocks of a prompt's longest cached prefix: `num_blocks` blocks of every group's table."""

    tables: Tables
    num_blocks: int

    def held(self) -> list[int]:
        return present(self.tables)


def present(tables: Tables) -> list[int]:
    """The blocks tables hold, group after group, in table order."""
    return [b for table in tables for b in table if b != NULL_BLOCK]


class KVTables:
    def __init__(self, blocks: BlockManager, groups: KVGroups) -> None:
        self.blocks = blocks
        self.groups = groups

    def empty(self) -> Tables:
        return [[] for _ in range(self.groups.count)]

    def grow(self, tables: Tables, num_tokens: int) -> bool:
        """Extends every table to `num_tokens` tokens if the pool can; False (taking nothing) if not."""
        extra = self.groups.blocks_for(num_tokens) - len(tables[0])
        if extra <= 0:
            return True
        got = self.blocks.try_allocate(extra * self.groups.count)
        if got is None:
            return False
        for g, table in enumerate(tables):
            table.extend(got[g * extra:(g + 1) * extra])
        return True

    def trim(self, tables: Tables, num_computed: int) -> None:
        """Frees the blocks of sliding groups that a sequence of `num_computed` computed tokens no longer keeps."""
        if not self.groups.sliding:  # every step of every sequence passes here
            return
        for g, table in enumerate(tables):
            stale = [j for j in range(min(self.groups.first_kept(g, num_computed), len(table))) if table[j] != NULL_BLOCK]
            if stale:
                self.blocks.free([table[j] for j in stale])
                for j in stale:
                    table[j] = NULL_BLOCK

    def free(self, tables: Tables) -> None:
        """Lets go of every block the tables hold (each group's in order: its last ones are evicted first)."""
        for table in tables:
            self.blocks.free([b for b in table if b != NULL_BLOCK])

    def register(self, tables: Tables, hashes: list[int], start: int) -> None:
        """Registers blocks [start, len(hashes)) of every table that holds them under their content hashes."""
        for g, table in enumerate(tables):
            for j in range(start, len(hashes)):
                if table[j] != NULL_BLOCK:
                    self.blocks.register(table[j], hashes[j], g)

    def match(self, hashes: list[int], keep_tokens: int | None = None) -> CachedPrefix:
        """Holds the cached blocks of the longest prefix of `hashes` (full blocks) that every group has: for a
        sequence of `keep_tokens` tokens (None: of the prefix itself), the blocks it keeps within the prefix."""
        groups = self.groups
        with self.blocks.locked():
            cached = [self.blocks.cached([(g, h) for h in hashes]) for g in range(groups.count)]
            # a full group keeps the whole prefix: its first uncached block bounds the hit
            n = min([c.index(False) if False in c else len(c)
                     for g, c in enumerate(cached) if groups.groups[g].window is None], default=len(hashes))
            while n:
                kept = self._kept(n, keep_tokens)
                if all(cached[g][j] for g in range(groups.count) for j in kept[g]):
                    break
                n -= 1
            else:
                return CachedPrefix(self.empty(), 0)
            held = iter(self.blocks.hold([(g, hashes[j]) for g in range(groups.count) for j in kept[g]]))
            return CachedPrefix([[next(held) if j in kept[g] else NULL_BLOCK for j in range(n)]
                                 for g in range(groups.count)], n)

    def _kept(self, n: int, keep_tokens: int | None) -> list[range]:
        """Per group, the blocks of an n-block prefix that a sequence keeps (of `keep_tokens`; None: of n blocks)."""
        tokens = n * self.groups.block_size if keep_tokens is None else keep_tokens
        return [range(self.groups.first_kept(g, tokens), n) for g in range(self.groups.count)]
