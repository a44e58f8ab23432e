"""Block lists become the fewest byte ranges that copy exactly those blocks."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.kvxfer.ranges import Ranges, block_ranges, check_blocks


def test_runs_consecutive_on_both_sides_merge() -> None:
    assert block_ranges([3, 4, 5, 9], [0, 1, 2, 3], 10) == Ranges([30, 90], [0, 30], [30, 10])


def test_run_breaks_when_only_one_side_is_consecutive() -> None:
    assert block_ranges([1, 2], [5, 7], 4) == Ranges([4, 8], [20, 28], [4, 4])


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="2 source blocks but 1"):
        block_ranges([1, 2], [1], 4)


@pytest.mark.parametrize("blocks, message", [([], "no blocks"), ([1, 1], "repeated"), ([0, 8], "outside")])
def test_bad_block_lists(blocks: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_blocks(blocks, 8, "lease")


def _blocks(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, 63), min_size=n, max_size=n, unique=True)


@given(st.integers(1, 64).flatmap(lambda n: st.tuples(_blocks(n), _blocks(n))))
def test_ranges_copy_every_block_to_its_pair(pair: tuple[list[int], list[int]]) -> None:
    src, dst = pair
    copied = {}
    ranges = block_ranges(src, dst, 16)
    for r_src, r_dst, length in zip(ranges.src, ranges.dst, ranges.length):
        assert length % 16 == 0
        for k in range(length // 16):
            copied[r_src // 16 + k] = r_dst // 16 + k
    assert ranges.nbytes == 16 * len(src)
    assert copied == dict(zip(src, dst))
