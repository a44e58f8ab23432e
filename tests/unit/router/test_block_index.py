"""The router's in-memory prefix-cache index: leading blocks per instance, batches in order only, whole sets."""

from __future__ import annotations

from services.common.registry_cache import Batch, HeldSet
from services.router.block_index import BlockIndex


def _whole(instance_id: str, hashes: list[int], number: int = 1) -> Batch:
    return Batch(instance_id, "inc", number, True, hashes, [])


def test_an_instance_counts_only_the_leading_blocks_it_holds_in_a_row() -> None:
    index = BlockIndex()
    index.apply(_whole("a", [1, 2, 3]))
    index.apply(_whole("b", [1, 3]))
    assert index.held_prefix(["a", "b", "c"], [1, 2, 3, 4]) == {"a": 3, "b": 1, "c": 0}


def test_a_batch_after_a_missed_one_leaves_the_instance_stale_until_its_set_is_read() -> None:
    index = BlockIndex()
    index.apply(_whole("a", [1]))
    index.apply(Batch("a", "inc", 2, False, [2], []))
    index.apply(Batch("a", "inc", 4, False, [4], [1]))  # batch 3 missed
    assert index.stale(["a"]) == ["a"]
    assert index.held_prefix(["a"], [1, 2]) == {"a": 2}  # what it held stays: a stale entry only mispredicts
    index.apply(Batch("a", "inc", 5, False, [5], []))  # waits for the set
    index.load("a", HeldSet("inc", 4, [2, 3, 4]))
    index.apply(Batch("a", "inc", 4, False, [4], [1]))  # in the set already
    index.apply(Batch("a", "inc", 5, False, [5], [2]))
    assert index.stale(["a"]) == []
    assert index.held_prefix(["a"], [3, 4, 5]) == {"a": 3}
    assert index.held_prefix(["a"], [2]) == {"a": 0}


def test_forgotten_instances_leave_no_entry() -> None:
    index = BlockIndex()
    for i in range(256):
        index.apply(_whole(f"i{i}", [i, 1000]))
    index.retain({"i7"})
    assert index.entries == 2
    assert index.held_prefix(["i7", "i8"], [7, 1000]) == {"i7": 2, "i8": 0}
