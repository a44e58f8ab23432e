"""Content addresses of full KV blocks: a chained SHA-256 of (parent hash, the block's token ids), rooted in a
namespace.

The same function runs in the engine (to find and register cached blocks) and in the router (to look up which
instance holds a prompt's prefix), so it must not depend on the process. 256 bits, as vLLM after CVE-2025-25183:
no two blocks share an address by chance or by a crafted prompt, so a hit is always the prompt's own K/V.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable

HASH_BYTES = 32
ROOT = 0


def namespace_root(namespace: str) -> int:
    """The parent hash of a namespace's first block: tenants (and salts) never share a block."""
    if not namespace:
        return ROOT
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest(), "little")


def chain(parent: int, tokens: list[int]) -> int:
    """The hash of a full block of `tokens` whose preceding blocks hash to `parent`."""
    h = hashlib.sha256(parent.to_bytes(HASH_BYTES, "little"))
    h.update(array("q", tokens).tobytes())
    return int.from_bytes(h.digest(), "little")


def block_hashes(tokens: list[int], block_size: int, namespace: str = "", limit: int | None = None) -> list[int]:
    """The hashes of the full blocks of `tokens` (the first `limit` of them at most)."""
    full = len(tokens) // block_size if limit is None else min(limit, len(tokens) // block_size)
    hashes: list[int] = []
    extend_hashes(hashes, tokens, block_size, namespace, full)
    return hashes


def extend_hashes(hashes: list[int], tokens: list[int], block_size: int, namespace: str, full: int) -> None:
    """Appends to `hashes` (of the first blocks of `tokens`) until it covers `full` blocks."""
    parent = hashes[-1] if hashes else namespace_root(namespace)
    for i in range(len(hashes), full):
        parent = chain(parent, tokens[i * block_size:(i + 1) * block_size])
        hashes.append(parent)



def to_wire(hashes: Iterable[int]) -> list[bytes]:
    """Hashes as a KV handle carries them (`KVHandle.block_hashes`) and the cache index stores them."""
    return [h.to_bytes(HASH_BYTES, "little") for h in hashes]


def from_wire(raw: Iterable[bytes]) -> list[int]:
    """Hashes from a KV handle or the index; one of another width can equal no hash."""
    return [int.from_bytes(b, "little") if len(b) == HASH_BYTES else -1 for b in raw]
