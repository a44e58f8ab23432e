"""The block manager's prefix cache: found blocks hold the content registered, held blocks are never evicted."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.engine.block_manager import BlockManager

NUM_BLOCKS = 8


class PrefixCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = BlockManager(NUM_BLOCKS, block_size=4)
        self.held: list[list[int]] = []
        self.content: dict[int, int] = {}  # hash → the block registered for it, while the pool keeps it
        self.hashes = itertools.count(1)

    def _apply_events(self) -> None:
        for stored, h in self.blocks.take_events() or ():
            if not stored:
                del self.content[h]

    @rule(n=st.integers(1, 3))
    def allocate(self, n: int) -> None:
        held_before = {b for group in self.held for b in group}
        got = self.blocks.try_allocate(n)
        self._apply_events()
        if got is None:
            assert n > self.blocks.num_free
            return
        assert not set(got) & held_before  # eviction takes only blocks that no one holds
        assert not set(got) & set(self.content.values())  # an evicted block's hash is forgotten
        self.held.append(got)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def register(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from(self.held))
        block = data.draw(st.sampled_from(group))
        if block in self.content.values():
            return
        h = next(self.hashes)
        self.blocks.register(block, h)
        self.content[h] = block

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        self.blocks.free(self.held.pop(data.draw(st.integers(0, len(self.held) - 1))))

    @precondition(lambda self: self.content)
    @rule(data=st.data())
    def match(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(sorted(self.content)))
        missing = max(self.content) + 1
        found = self.blocks.match([h, missing])
        assert found == [self.content[h]]  # the longest prefix: the unknown second hash stops it
        self.held.append(found)

    @invariant()
    def accounting(self) -> None:
        held = {b for group in self.held for b in group}
        assert self.blocks.num_used == len(held)
        assert self.blocks.num_free + self.blocks.num_used == NUM_BLOCKS
        assert self.blocks.num_cached == len(set(self.content.values()) - held)
        assert sorted(self.blocks.cached_hashes()) == sorted(self.content)

    def teardown(self) -> None:
        for group in self.held:
            self.blocks.free(group)
        assert self.blocks.num_used == 0 and self.blocks.num_free == NUM_BLOCKS


TestPrefixCache = PrefixCacheMachine.TestCase
TestPrefixCache.settings = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_least_recently_released_block_is_evicted_first() -> None:
    blocks = BlockManager(3, block_size=4)
    a, b, c = blocks.allocate(3)
    for block, h in ((a, 10), (b, 20), (c, 30)):
        blocks.register(block, h)
    blocks.free([b])
    blocks.free([a])
    blocks.free([c])
    blocks.take_events()
    assert blocks.allocate(1) == [b]
    assert blocks.take_events() == [(False, 20)]
    assert blocks.match([10, 20, 30]) == [a]  # the prefix stops at the evicted block
    assert blocks.match([30]) == [c]


def test_caching_off_finds_nothing_and_frees_blocks_back() -> None:
    blocks = BlockManager(2, block_size=4, caching=False)
    (a,) = blocks.allocate(1)
    blocks.register(a, 7)
    blocks.free([a])
    assert blocks.match([7]) == [] and blocks.num_cached == 0 and blocks.take_events() == []
