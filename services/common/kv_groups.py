"""The model's layers grouped by how long their K/V is kept, as vLLM's hybrid allocator groups them.

A full-attention layer keeps every block of a sequence; a sliding layer only those its next query reads (the last
`window` positions: at most window / block_size + 1 blocks). Layers that keep the same blocks form a group, and
every group has the same number of layers (the smallest kind's count; a kind's last group may be short), so one
pool of equal blocks serves them all: a block holds `slots` layers' K/V of one group for block_size tokens, and
each group gives a sequence its own table of blocks. A model of one kind (Llama, Mistral) is one group: a block
holds every layer, as before groups existed. Full groups come first, so group 0 is a full one where there is one.

A sliding group's table keeps its length; a block out of the window is NULL_BLOCK there. What a sequence of t
computed tokens keeps of group g is `kept(g, t)`: blocks [first, blocks_for(t)). Handles and pulls carry exactly
those, group after group (`flat`), so both sides of a transfer agree on them from t alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.model_config import ModelConfig

NULL_BLOCK = -1  # a sliding group's entry for a block out of the window: freed, never read


@dataclass(frozen=True, slots=True)
class LayerGroup:
    window: int | None  # None: full attention
    layers: tuple[int, ...]  # model layer indices, ascending


@dataclass(frozen=True, slots=True)
class KVGroups:
    groups: tuple[LayerGroup, ...]
    block_size: int

    @classmethod
    def of_model(cls, config: ModelConfig, block_size: int) -> KVGroups:
        kinds: dict[int | None, list[int]] = {}
        for layer in range(config.num_layers):
            kinds.setdefault(config.window(layer), []).append(layer)
        order = sorted(kinds, key=lambda w: (w is not None, w or 0))  # full first
        size = min(len(kinds[w]) for w in order)
        return cls(tuple(LayerGroup(w, tuple(kinds[w][i:i + size])) for w in order
                         for i in range(0, len(kinds[w]), size)), block_size)

    @property
    def count(self) -> int:
        return len(self.groups)

    @property
    def num_layers(self) -> int:
        return sum(len(g.layers) for g in self.groups)

    @property
    def sliding(self) -> bool:
        return any(g.window is not None for g in self.groups)

    def group_of(self, layer: int) -> int:
        return next(i for i, g in enumerate(self.groups) if layer in g.layers)

    def placement(self, start: int, stop: int) -> tuple[tuple[int, int], ...]:
        """(group, slot) of each layer in [start, stop) in a pool holding those layers (a PP stage's)."""
        taken = [0] * self.count
        places = []
        for layer in range(start, stop):
            g = self.group_of(layer)
            places.append((g, taken[g]))
            taken[g] += 1
        return tuple(places)

    def slots(self, start: int, stop: int) -> int:
        """Layer slots per block of a pool holding layers [start, stop): the most any group has there."""
        return max((slot + 1 for _, slot in self.placement(start, stop)), default=1)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def first_kept(self, group: int, num_tokens: int) -> int:
        """The first block a sequence of `num_tokens` computed tokens keeps in `group`: every block of a full
        group; in a sliding one the blocks a query at the last position reads (so that it can be computed again,
        as a decode without the first token does) and any after it."""
        window = self.groups[group].window
        return 0 if window is None else max(0, num_tokens - window) // self.block_size

    def kept(self, group: int, num_tokens: int) -> range:
        return range(self.first_kept(group, num_tokens), self.blocks_for(num_tokens))

    def flat(self, tables: list[list[int]], num_tokens: int) -> list[int]:
        """The blocks a sequence of `num_tokens` tokens keeps, group after group (what a handle carries)."""
        return [tables[g][j] for g in range(self.count) for j in self.kept(g, num_tokens)]

    def tables(self, flat: list[int], num_tokens: int) -> list[list[int]]:
        """Inverse of `flat`: the per-group tables, NULL_BLOCK where a sliding group keeps nothing."""
        nb = self.blocks_for(num_tokens)
        if len(flat) != self.num_kept(num_tokens):
            raise ValueError(f"{len(flat)} blocks for {num_tokens} tokens, whose K/V takes {self.num_kept(num_tokens)}")
        it = iter(flat)
        return [[next(it) if j in self.kept(g, num_tokens) else NULL_BLOCK for j in range(nb)] for g in range(self.count)]

    def peak_blocks(self, prompt_tokens: int, total_tokens: int, chunk: int) -> int:
        """The most blocks a request holds at once: while its prompt is computed in chunks of at most `chunk`
        tokens (each chunk's blocks besides the window in a sliding group), or at its last decode step."""
        def held(g: int, tokens: int, new: int) -> int:
            window = self.groups[g].window
            full = self.blocks_for(tokens + new)
            return full if window is None else min(full, (window + new) // self.block_size + 2)

        prefill = sum(held(g, prompt_tokens - min(chunk, prompt_tokens), min(chunk, prompt_tokens))
                      for g in range(self.count))
        return max(prefill, sum(held(g, total_tokens - 1, 1) for g in range(self.count)))

    def num_kept(self, num_tokens: int) -> int:
        """Blocks a sequence of `num_tokens` computed tokens keeps, all groups together."""
        return sum(len(self.kept(g, num_tokens)) for g in range(self.count))

    def fill(self, prefix: list[list[int]], rest: list[int], num_tokens: int) -> list[int]:
        """`flat` of a sequence of `num_tokens` tokens whose tables begin with `prefix` (held cached blocks, as
        many in every group) and go on with `rest`, taken in turn."""
        it = iter(rest)
        return [prefix[g][j] if j < len(prefix[g]) else next(it) for g in range(self.count) for j in self.kept(g, num_tokens)]

    def missing(self, num_tokens: int, start_block: int, source_tokens: int) -> list[tuple[int, int]] | None:
        """For each block from `start_block` on that a sequence of `num_tokens` keeps, in `flat` order, its group
        and its position in the flat blocks of a handle of `source_tokens`; None when the handle lacks one (before
        its sliding window)."""
        found = []
        offset = 0
        for g in range(self.count):
            source = self.kept(g, source_tokens)
            for j in self.kept(g, num_tokens):
                if j >= start_block:
                    if j not in source:
                        return None
                    found.append((g, offset + j - source.start))
            offset += len(source)
        return found
