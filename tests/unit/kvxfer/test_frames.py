"""Small ranges travel packed in frames of bounded size; large ranges travel alone, zero-copy."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from services.kvxfer.ucx.frames import DIRECT_BYTES, FRAME_BYTES, Frame, plan_frames

KB = 1 << 10


def test_small_ranges_are_packed_up_to_the_frame_size() -> None:
    per_frame = FRAME_BYTES // (64 * KB)
    frames = plan_frames([64 * KB] * (2 * per_frame + 2), pack=True)
    assert [f.count for f in frames] == [per_frame, per_frame, 2]
    assert all(f.nbytes <= FRAME_BYTES for f in frames)


def test_large_ranges_travel_alone() -> None:
    frames = plan_frames([64 * KB, DIRECT_BYTES, 64 * KB, 64 * KB], pack=True)  # DIRECT_BYTES >= FRAME_BYTES
    assert frames == [Frame(0, 1, 64 * KB), Frame(1, 1, DIRECT_BYTES), Frame(2, 2, 128 * KB)]
    assert [f.packed for f in frames] == [False, False, True]


def test_no_packing_into_device_memory() -> None:
    assert [f.count for f in plan_frames([64 * KB] * 3, pack=False)] == [1, 1, 1]


@given(st.lists(st.integers(1, 3 * DIRECT_BYTES), max_size=200), st.booleans())
def test_frames_cover_every_range_once_in_order(lengths: list[int], pack: bool) -> None:
    frames = plan_frames(lengths, pack)
    assert [i for f in frames for i in range(f.first, f.first + f.count)] == list(range(len(lengths)))
    assert all(f.nbytes == sum(lengths[f.first:f.first + f.count]) for f in frames)
    assert all(f.nbytes <= FRAME_BYTES for f in frames if f.packed)


def _greedy(lengths: list[int]) -> list[Frame]:
    """The plan range by range: a frame takes ranges under DIRECT_BYTES while they fit in FRAME_BYTES."""
    frames, i = [], 0
    while i < len(lengths):
        j, total = i, 0
        while j < len(lengths) and lengths[j] < DIRECT_BYTES and total + lengths[j] <= FRAME_BYTES:
            total += lengths[j]
            j += 1
        if j == i:
            j, total = i + 1, lengths[i]
        frames.append(Frame(i, j - i, total))
        i = j
    return frames


@given(st.lists(st.sampled_from([1, 1024, 64 * KB, DIRECT_BYTES - 1, DIRECT_BYTES, 3 * DIRECT_BYTES]), max_size=300))
def test_frames_are_the_greedy_plan_from_numpy_lengths_too(lengths: list[int]) -> None:
    assert plan_frames(np.array(lengths, np.int64), True) == plan_frames(lengths, True) == _greedy(lengths)
