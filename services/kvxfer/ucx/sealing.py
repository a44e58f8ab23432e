"""Encryption of the KV bytes of cross-host pulls (`--encrypt-kv`): each frame of a pull travels as one sealed
chunk, AES-256-GCM under a key derived from the deployment secret (HKDF-SHA256, a label of its own).

Each chunk gets a fresh random 96-bit nonce (the key is shared by every kvxfer of the deployment, so no counter
could be kept unique across them), and its associated data is the pull's id (random, chosen by the destination)
and the chunk's index: a chunk altered, replayed from another pull or moved to another position fails to open,
and the pull fails instead of writing it. On the wire: nonce | ciphertext (the clear chunk's length) | tag.

Every frame is staged (packed, sealed, sent; received, opened, unpacked): a pool's bytes never go on the wire
directly, GPU pools' included, which so lose GPU-direct transfers while encryption is on. Ranges longer than a
frame are cut into frames first (`chunked`), so sealing, sending and opening overlap within a large range too.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from services.kvxfer.errors import Failure, XferError
from services.kvxfer.pools import PoolRanges
from services.kvxfer.ucx.frames import FRAME_BYTES, Frame, Staging

NONCE_BYTES, TAG_BYTES = 12, 16
OVERHEAD = NONCE_BYTES + TAG_BYTES  # a sealed chunk's bytes beyond its clear bytes
KEY_LABEL = b"distserve kvxfer kv encryption v1"
CIPHER_THREADS = 2  # a pull's frames sealed or opened at once, per kvxfer side


def kv_key(secret: bytes) -> bytes:
    """The 256-bit key of KV encryption, derived from the deployment secret."""
    return HKDF(SHA256(), 32, salt=None, info=KEY_LABEL).derive(secret)


class ChunkCodec:
    """Seals and opens the chunks of pulls under one key. Safe to share between threads (AESGCM is)."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, pull_id: bytes, index: int, clear: np.ndarray, out: np.ndarray) -> None:
        """Write clear's sealed chunk into out (len(clear) + OVERHEAD bytes)."""
        nonce = os.urandom(NONCE_BYTES)
        out[:NONCE_BYTES] = np.frombuffer(nonce, np.uint8)
        self._aead.encrypt_into(nonce, clear, _associated(pull_id, index), out[NONCE_BYTES:])

    def open(self, pull_id: bytes, index: int, sealed: np.ndarray, out: np.ndarray) -> None:
        """Write the clear bytes of sealed (a chunk seal wrote) into out; XferError(DATA_LOSS) if it does not
        authenticate as chunk `index` of this pull (out may then hold garbage: the caller must not use it)."""
        try:
            self._aead.decrypt_into(sealed[:NONCE_BYTES].tobytes(), sealed[NONCE_BYTES:],
                                    _associated(pull_id, index), out)
        except (InvalidTag, ValueError) as e:
            raise XferError(Failure.DATA_LOSS, f"encrypted KV chunk {index} failed authentication "
                                               "(altered, replayed or out of place on the wire)") from e


def chunked(ranges: PoolRanges, limit: int = FRAME_BYTES) -> PoolRanges:
    """The same bytes as ranges of at most `limit` bytes (each longer range cut in order), so that a large range
    travels as several chunks: one is sealed or opened while another is on the wire. Both sides of a pull cut
    alike, as they plan frames alike, from the lengths alone."""
    lengths = np.asarray(ranges.lengths, np.int64)
    if not len(lengths) or lengths.max() <= limit:
        return ranges
    pieces = -(-lengths // limit)
    within = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # a piece's place in its range
    offsets = np.repeat(np.asarray(ranges.offsets, np.int64), pieces) + within * limit
    return PoolRanges(ranges.pool, offsets, np.minimum(np.repeat(lengths, pieces) - within * limit, limit))


def _associated(pull_id: bytes, index: int) -> bytes:
    return pull_id + struct.pack("<Q", index)


class Sealer:
    """Frames of a pull as sealed chunks, through reused staging buffers. The cipher runs on threads (AES-GCM
    releases the GIL), so the seal of one frame overlaps the sends of others and the event loop keeps
    progressing UCX."""

    def __init__(self, key: bytes, threads: int = CIPHER_THREADS) -> None:
        self._codec = ChunkCodec(key)
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="kv-seal")
        self._clear = Staging()
        self._sealed = Staging(FRAME_BYTES + OVERHEAD)

    async def send(self, send: Callable[[np.ndarray], Awaitable[None]], src: PoolRanges, frame: Frame,
                   pull_id: bytes, index: int) -> None:
        """Pack the frame's ranges of src, seal them as chunk `index` of the pull, and send(sealed chunk)."""
        clear, sealed = self._clear.get(frame.nbytes), self._sealed.get(frame.nbytes + OVERHEAD)
        src.pack(frame.first, frame.count, clear)
        out = sealed[:frame.nbytes + OVERHEAD]
        await asyncio.get_running_loop().run_in_executor(self._threads, self._codec.seal, pull_id, index,
                                                         clear[:frame.nbytes], out)
        self._clear.put(clear)
        await send(out)
        self._sealed.put(sealed)  # not after a failure: an aborted request may still hold it

    async def recv(self, recv: Callable[[np.ndarray], Awaitable[None]], dst: PoolRanges, frame: Frame,
                   pull_id: bytes, index: int) -> None:
        """recv(buffer) a sealed chunk, open it as chunk `index` of the pull, unpack it into the frame's ranges of
        dst; XferError(DATA_LOSS), dst untouched, if it does not authenticate."""
        sealed, clear = self._sealed.get(frame.nbytes + OVERHEAD), self._clear.get(frame.nbytes)
        await recv(sealed[:frame.nbytes + OVERHEAD])
        await asyncio.get_running_loop().run_in_executor(self._threads, self._codec.open, pull_id, index,
                                                         sealed[:frame.nbytes + OVERHEAD], clear[:frame.nbytes])
        self._sealed.put(sealed)
        dst.unpack(frame.first, frame.count, clear)
        self._clear.put(clear)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
