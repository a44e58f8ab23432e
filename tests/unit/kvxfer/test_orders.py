"""A pull order survives its wire form, read from a receive buffer that is larger and holds stale bytes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.kvxfer.orders import (
    MAX_RANGES,
    PullOrder,
    RangeHeader,
    RangeOrder,
    SourceSpans,
    decode_order,
    encode_order,
    range_body,
)

BLOCK_IDS = st.lists(st.integers(0, 2**31 - 1), max_size=300)


@given(BLOCK_IDS, BLOCK_IDS, st.text(max_size=40), st.booleans(), st.booleans(), st.sampled_from(["", "ab" * 16]))
def test_an_order_reads_back_as_written(src: list[int], dst: list[int], instance_id: str, checksum: bool,
                                        pack: bool, pull_id: str) -> None:
    order = PullOrder("9f" * 16, instance_id, src, dst, 65536, checksum, pack, pull_id)
    buf = np.full(1 << 16, 0xAB, dtype=np.uint8)  # a reused receive buffer: stale bytes after the message
    wire = encode_order(order)
    buf[:len(wire)] = wire
    assert decode_order(buf) == order


def test_a_block_id_beyond_int32_is_refused_not_wrapped() -> None:
    with pytest.raises(OverflowError):
        encode_order(PullOrder("lease", "p0", [2**31], [0], 65536, False, True))


@given(st.lists(st.tuples(st.text(max_size=20), st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 2**30)),
                                                        max_size=50)), max_size=4), st.booleans())
def test_a_range_order_reads_back_as_written_from_its_two_messages(parts: list, checksum: bool) -> None:
    order = RangeOrder("lease", "p0", [SourceSpans(pool, np.array([o for o, _ in r], np.int64).reshape(-1),
                                                   np.array([n for _, n in r], np.int64).reshape(-1))
                                       for pool, r in parts], checksum, pack=True, pull_id="cd" * 16)
    buf = np.full(1 << 16, 0xAB, dtype=np.uint8)
    wire = encode_order(order)
    buf[:len(wire)] = wire
    header = decode_order(buf)
    assert isinstance(header, RangeHeader) and header.items == 2 * sum(len(r) for _, r in parts)
    body = np.frombuffer(range_body(order).tobytes(), np.int64)  # as received: a fresh buffer
    assert header.with_body(body) == order


def test_a_range_order_past_the_range_cap_is_refused() -> None:
    wire = encode_order(RangeOrder("lease", "p0", [], False, True)).tobytes()
    huge = wire.replace(b'"counts": []', b'"counts": [%d]' % (MAX_RANGES + 1)).replace(b'"pools": []', b'"pools": ["p"]')
    buf = np.frombuffer(len(huge[4:]).to_bytes(4, "little") + huge[4:], np.uint8)
    with pytest.raises(ValueError, match="range order"):
        decode_order(buf)
