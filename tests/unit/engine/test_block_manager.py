"""Block manager properties: no block handed out twice, every free returns it, nothing leaks."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.engine.block_manager import BlockManager

NUM_BLOCKS = 16


class BlockManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = BlockManager(NUM_BLOCKS, block_size=4)
        self.held: list[list[int]] = []

    @rule(n=st.integers(0, NUM_BLOCKS + 2))
    def allocate(self, n: int) -> None:
        free_before = self.blocks.num_free
        if n > free_before:
            with pytest.raises(MemoryError):
                self.blocks.allocate(n)
            assert self.blocks.num_free == free_before  # a refused allocation takes nothing
            return
        got = self.blocks.allocate(n)
        assert len(got) == n
        assert not set(got) & {b for held in self.held for b in held}  # a shared block stays taken
        self.held.append(got)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        group = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        free_before = self.blocks.num_free
        self.blocks.free(group)
        still_held = {b for other in self.held for b in other}
        assert self.blocks.num_free == free_before + len(set(group) - still_held)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def share(self, data: st.DataObject) -> None:
        """A fork holds some of a group's blocks too: they stay out of the pool until both are freed."""
        group = self.held[data.draw(st.integers(0, len(self.held) - 1))]
        shared = group[: data.draw(st.integers(0, len(group)))]
        used_before = self.blocks.num_used
        self.blocks.share(shared)
        assert self.blocks.num_used == used_before
        self.held.append(list(shared))

    @precondition(lambda self: self.held and self.held[-1])
    @rule()
    def double_free_is_refused(self) -> None:
        group = self.held.pop()
        self.blocks.free(group)
        if any(group[0] in other for other in self.held):
            return  # still held by a fork
        with pytest.raises(ValueError):
            self.blocks.free(group[:1])

    @invariant()
    def accounting(self) -> None:
        held = {b for group in self.held for b in group}
        assert all(len(set(group)) == len(group) for group in self.held)
        assert len(held) == self.blocks.num_used
        assert self.blocks.num_free + self.blocks.num_used == NUM_BLOCKS
        assert all(0 <= b < NUM_BLOCKS for b in held)

    def teardown(self) -> None:
        for group in self.held:
            self.blocks.free(group)
        assert self.blocks.num_free == NUM_BLOCKS and self.blocks.num_used == 0


TestBlockManager = BlockManagerMachine.TestCase
TestBlockManager.settings = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # shared cores


@settings(deadline=None)
@given(st.integers(0, 100), st.integers(1, 32))
def test_blocks_for_covers_tokens_exactly(tokens: int, block_size: int) -> None:
    n = BlockManager(1, block_size).blocks_for(tokens)
    assert (n - 1) * block_size < tokens <= n * block_size if tokens else n == 0


def test_concurrent_allocations_and_frees_never_share_a_block() -> None:
    """The engine thread and a decode instance's event loop allocate and free at once."""
    blocks = BlockManager(64, block_size=4)
    owned: list[list[int]] = [[], []]

    def churn(me: int) -> None:
        for i in range(3000):
            got = blocks.try_allocate(1 + i % 5)
            if got is not None:
                owned[me].extend(got)
            if len(owned[me]) > 20:
                blocks.free(owned[me][:10])
                del owned[me][:10]

    threads = [threading.Thread(target=churn, args=(me,)) for me in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not set(owned[0]) & set(owned[1])
    assert blocks.num_used == len(owned[0]) + len(owned[1])
    assert blocks.num_free + blocks.num_used == 64
