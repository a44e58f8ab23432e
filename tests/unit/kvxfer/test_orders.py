"""A pull order survives its wire form, read from a receive buffer that is larger and holds stale bytes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.kvxfer.orders import PullOrder, decode_order, encode_order

BLOCK_IDS = st.lists(st.integers(0, 2**31 - 1), max_size=300)


@given(BLOCK_IDS, BLOCK_IDS, st.text(max_size=40), st.booleans(), st.booleans())
def test_an_order_reads_back_as_written(src: list[int], dst: list[int], instance_id: str, checksum: bool,
                                        pack: bool) -> None:
    order = PullOrder("9f" * 16, instance_id, src, dst, 65536, checksum, pack)
    buf = np.full(1 << 16, 0xAB, dtype=np.uint8)  # a reused receive buffer: stale bytes after the message
    wire = encode_order(order)
    buf[:len(wire)] = wire
    assert decode_order(buf) == order


def test_a_block_id_beyond_int32_is_refused_not_wrapped() -> None:
    with pytest.raises(OverflowError):
        encode_order(PullOrder("lease", "p0", [2**31], [0], 65536, False, True))
