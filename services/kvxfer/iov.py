"""Scatter-gather UCX messages: a frame of scattered pool ranges sent and received as one message with UCP's IOV
datatype, straight from and into the mapped pools (no packing through staging buffers).

ucxx's Python API sends one contiguous buffer per message, so scattered blocks were packed into frames (or cost
~10 µs of UCX and Python work a message). With IOV the source sends straight from its pool and the destination's
UCX scatters each message into the ranges (over TCP it receives into its own buffers first): one copy of every
byte where packing and unpacking took two. 4096 random 64 KB blocks between two kvxfers on loopback: 3.2-3.5 GB/s
against 2.5-2.8 GB/s packed (raw ucxx, one contiguous buffer: ~5 GB/s).

The helper `ucp_iov.c` is compiled on first use against the UCX headers of the libucx wheel that ucxx runs on.
Where it cannot be built, frames are packed (frames.py); the bytes on the wire are the same either way, so the
two sides of a pull choose independently.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path

import libucx
import numpy as np

from services.engine.cpu.build import load_kernel

HERE = Path(__file__).parent
UCS_INPROGRESS = 1
_POST = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p,
         ctypes.c_void_p)


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
    lib.iov_send.argtypes = lib.iov_recv.argtypes = _POST
    lib.iov_send.restype = lib.iov_recv.restype = lib.iov_test.restype = ctypes.c_int
    lib.iov_test.argtypes = (ctypes.c_void_p,)
    lib.iov_cancel.argtypes = (ctypes.c_uint64, ctypes.c_void_p)
    lib.iov_status_text.argtypes, lib.iov_status_text.restype = (ctypes.c_int,), ctypes.c_char_p
    lib.iov_xfer_size.restype = ctypes.c_int64
    return lib


class IovRequest:
    """One posted scatter-gather send or receive, read like ucxx's requests: `completed`, `check_error()`.

    It holds the pool array whose memory it reads or writes until it has ended."""

    __slots__ = ("_keep", "_lib", "_status", "_xfer", "ep", "receive")

    def __init__(self, lib: ctypes.CDLL, keep: np.ndarray, ep: object, receive: bool) -> None:
        self._lib = lib
        self._xfer = ctypes.create_string_buffer(lib.iov_xfer_size())
        self._keep = keep
        self._status = UCS_INPROGRESS
        self.ep = ep
        self.receive = receive

    @classmethod
    def send(cls, ep_handle: int, ep: object, tag: int, pool: np.ndarray, offsets: Sequence[int],
             lengths: Sequence[int]) -> IovRequest:
        """Post a send of pool[offsets[i]:offsets[i] + lengths[i]] for each i, as one message."""
        return cls._post(False, ep_handle, ep, tag, pool, offsets, lengths)

    @classmethod
    def recv(cls, worker_handle: int, ep: object, tag: int, pool: np.ndarray, offsets: Sequence[int],
             lengths: Sequence[int]) -> IovRequest:
        """Post a receive of one message of exactly sum(lengths) bytes into the ranges, in order."""
        return cls._post(True, worker_handle, ep, tag, pool, offsets, lengths)

    @classmethod
    def _post(cls, receive: bool, handle: int, ep: object, tag: int, pool: np.ndarray, offsets: Sequence[int],
              lengths: Sequence[int]) -> IovRequest:
        lib = helper()
        request = cls(lib, pool, ep, receive)
        at, size = np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)
        post = lib.iov_recv if receive else lib.iov_send
        status = post(handle, tag, len(at), pool.ctypes.data, at.ctypes.data, size.ctypes.data, request._xfer)
        if status != 0:
            raise IovError(f"posting a scatter-gather message failed: {lib.iov_status_text(status).decode()}")
        return request

    @property
    def completed(self) -> bool:
        if self._status == UCS_INPROGRESS:
            self._status = self._lib.iov_test(self._xfer)  # frees the request once it has ended
        return self._status != UCS_INPROGRESS

    def check_error(self) -> None:
        if self._status != 0:
            raise IovError(f"scatter-gather message failed: {self._lib.iov_status_text(self._status).decode()}")

    def cancel(self, worker_handle: int) -> None:
        """Withdraw it if still under way (it then ends as cancelled)."""
        if self._status == UCS_INPROGRESS:
            self._lib.iov_cancel(worker_handle, self._xfer)
