"""CRC32 over pool views sees any changed byte and is independent of how the bytes are split."""

import zlib

import numpy as np

from services.kvxfer.checksum import crc32


def test_crc_over_views_equals_crc_of_the_concatenation() -> None:
    data = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)
    assert crc32([data[:1000], data[1000:3000], data[3000:]]) == zlib.crc32(data.tobytes())


def test_crc_sees_one_flipped_byte() -> None:
    data = np.zeros(1 << 16, dtype=np.uint8)
    before = crc32([data])
    data[12345] ^= 1
    assert crc32([data]) != before
