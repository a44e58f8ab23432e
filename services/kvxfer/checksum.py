"""CRC32 over byte ranges of a pool, to compare source and destination after a pull."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from services.kvxfer.pools import host_view


def crc32(views: Iterable[object]) -> int:
    """CRC32 of the concatenated 1-D uint8 views (device views are copied to the host first)."""
    crc = 0
    for view in views:
        crc = zlib.crc32(host_view(view), crc)
    return crc
