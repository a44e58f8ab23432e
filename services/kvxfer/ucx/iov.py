"""Scatter-gather UCX messages: a frame of scattered pool ranges sent and received as one message with UCP's IOV
datatype, straight from and into the mapped pools (no packing through staging buffers).

ucxx's Python API sends one contiguous buffer per message, so scattered blocks were packed into frames (or cost
a message's UCX and Python work each). With IOV the source sends straight from its pool and the destination's
UCX scatters each message into the ranges (over TCP it receives into its own buffers first): one copy of every
byte where packing and unpacking took two. A pull's scatter-gather messages are posted in one call and tested in
one call per event-loop turn (a status call per message and turn costs the destination a visible share of a large
pull).

The helper `ucp_iov.c` is compiled on first use against the UCX headers of the libucx wheel that ucxx runs on.
Where it cannot be built, frames are packed (frames.py); the bytes on the wire are the same either way, so the
two sides of a pull choose independently.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import libucx
import numpy as np

from services.common.cbuild import load_kernel

HERE = Path(__file__).parent
UCS_INPROGRESS = 1
_POST = (ctypes.c_uint64, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class IovError(Exception):
    """A scatter-gather transfer that could not be posted or did not complete."""


@functools.cache
def helper() -> ctypes.CDLL | None:
    """The compiled ucp_iov.c, or None where it cannot be built or C kernels are off (`DISTSERVE_CPU_KERNELS=0`)."""
    ucx = Path(libucx.__file__).parent
    lib = load_kernel("ucp_iov", HERE, (f"-I{ucx / 'include'}", f"-L{ucx / 'lib'}", f"-Wl,-rpath,{ucx / 'lib'}",
                                        "-lucp", "-lucs"))
    if lib is None:
        return None
    lib.iov_post.argtypes, lib.iov_post.restype = _POST, ctypes.c_int
    lib.iov_test.argtypes, lib.iov_test.restype = (ctypes.c_void_p,), ctypes.c_int
    lib.iov_cancel.argtypes = (ctypes.c_uint64, ctypes.c_void_p)
    lib.iov_status_text.argtypes, lib.iov_status_text.restype = (ctypes.c_int,), ctypes.c_char_p
    lib.iov_batch_size.restype = ctypes.c_int64
    return lib


@dataclass(frozen=True, slots=True)
class IovMessages:
    """Messages of scattered pool ranges: message i has tag tags[i] and the next counts[i] of the ranges
    (offsets[j], lengths[j]) of the pool."""

    tags: list[int]
    counts: list[int]
    offsets: list[int]
    lengths: list[int]


class IovRequest:
    """Scatter-gather messages posted together and read like one of ucxx's requests: `completed` once every
    posted message has ended, then `check_error()`. One status call per event-loop turn for the whole batch.

    It holds the pool array whose memory it reads or writes until it has ended."""

    __slots__ = ("_batch", "_keep", "_lib", "_status", "ep", "receive")

    def __init__(self, lib: ctypes.CDLL, keep: np.ndarray, ep: object, receive: bool) -> None:
        self._lib = lib
        self._batch = ctypes.create_string_buffer(lib.iov_batch_size())
        self._keep = keep
        self._status = UCS_INPROGRESS
        self.ep = ep
        self.receive = receive

    @classmethod
    def send(cls, ep_handle: int, ep: object, pool: np.ndarray, messages: IovMessages) -> IovRequest:
        """Post a send of each message's ranges as one message."""
        return cls._post(False, ep_handle, ep, pool, messages)

    @classmethod
    def recv(cls, worker_handle: int, ep: object, pool: np.ndarray, messages: IovMessages) -> IovRequest:
        """Post a receive of each message into its ranges, in order; a message must fill them exactly."""
        return cls._post(True, worker_handle, ep, pool, messages)

    @classmethod
    def _post(cls, receive: bool, handle: int, ep: object, pool: np.ndarray, m: IovMessages) -> IovRequest:
        """Post the messages. If posting stops at a failure, the receives already posted are withdrawn and the
        request ends with that failure (the sends already posted end with their endpoint)."""
        lib = helper()
        request = cls(lib, pool, ep, receive)
        tags = np.asarray(m.tags, np.uint64)
        counts, at, size = (np.asarray(x, np.int64) for x in (m.counts, m.offsets, m.lengths))
        status = lib.iov_post(handle, receive, len(tags), tags.ctypes.data, counts.ctypes.data, pool.ctypes.data,
                              at.ctypes.data, size.ctypes.data, request._batch)
        if status != 0 and receive:
            request.cancel(handle)
        return request

    @property
    def completed(self) -> bool:
        if self._status == UCS_INPROGRESS:
            self._status = self._lib.iov_test(self._batch)  # frees the batch once it has ended
        return self._status != UCS_INPROGRESS

    def check_error(self) -> None:
        if self._status != 0:
            raise IovError(f"scatter-gather message failed: {self._lib.iov_status_text(self._status).decode()}")

    def cancel(self, worker_handle: int) -> None:
        """Withdraw the messages still under way (they then end as cancelled)."""
        if self._status == UCS_INPROGRESS:
            self._lib.iov_cancel(worker_handle, self._batch)
