"""The TP all-reduce between CPU ranks on one host, through shared memory (cpu/shm_allreduce.c) instead of gloo.

gloo goes through the loopback TCP stack for every all-reduce, two per layer; a decode step's are a few KB each,
so their latency, not their bytes, is what a TP decode step pays. Here each rank copies its part into a slot
of a segment the group shares and sums the others' slots once every rank has arrived.

The group's rank 0 makes the segment (a file in this user's private pool directory, unlinked once every rank
has mapped it: nothing is left behind, whatever ends the processes) and publishes its name in the instance's
store. Every rank says whether it could map it; only if all could does the group use it (ranks on different
hosts, or without a C compiler, keep gloo).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import uuid
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from services.common.cbuild import Kernel, kernel_function
from services.common.pool_files import ensure_pool_dir, pool_dir

CPU_KERNELS = Path(__file__).parent.parent / "cpu"
LINE = 64
SLOT_FLOATS = 256 << 10  # 1 MB a slot: larger tensors go through in pieces
TIMEOUT_S = 120.0  # as gloo's (comm.TIMEOUT): a rank that never arrives fails the step instead of hanging it
_ARGS = (ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_uint32, ctypes.c_void_p,
         ctypes.c_long, ctypes.c_double)


def _kernel() -> Kernel | None:
    return kernel_function("shm_allreduce", "shm_allreduce", _ARGS, ctypes.c_long, CPU_KERNELS)


def _lock() -> Kernel | None:
    return kernel_function("shm_allreduce", "shm_lock", (ctypes.c_int, ctypes.c_long), ctypes.c_int, CPU_KERNELS)


class ShmAllReduce:
    """One rank's end of a group's shared segment: the mapping, and the open file that holds this rank's lock."""

    def __init__(self, fn: Kernel, fd: int, segment: mmap.mmap, rank: int, size: int) -> None:
        self._fn = fn
        self._fd = fd
        self._segment = segment
        self._base = np.frombuffer(segment, np.uint8).ctypes.data
        self.rank, self.size = rank, size
        self._op = 0

    @staticmethod
    def segment_bytes(size: int) -> int:
        return size * LINE + 2 * size * SLOT_FLOATS * 4

    @staticmethod
    def takes(t: torch.Tensor) -> bool:
        """Whether this path sums `t` (fp32, contiguous, host memory): the same answer on every rank."""
        return t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """`t` summed over the group, in place."""
        flat = t.view(-1)
        for start in range(0, max(flat.numel(), 1), SLOT_FLOATS):
            piece = flat[start:start + SLOT_FLOATS]
            self._op = (self._op + 1) & 0xFFFFFFFF  # the kernel compares counters modulo 2^32
            late = self._fn(self._base, self._fd, self.rank, self.size, SLOT_FLOATS, self._op, piece.data_ptr(),
                            piece.numel(), TIMEOUT_S)
            if late > 0:
                raise RuntimeError(f"TP all-reduce: rank {late - 1} of the group is gone")
            if late < 0:
                raise RuntimeError(f"TP all-reduce: rank {-late - 1} of the group did not arrive in {TIMEOUT_S:.0f} s")
        return t

    def close(self) -> None:
        """Leave the group (what a rank's death does): the others' waits for this rank fail at once."""
        os.close(self._fd)


def join_segment(store: dist.Store, prefix: str, rank: int, size: int) -> ShmAllReduce | None:
    """This rank's end of the group's segment, or None (on every rank alike) where some rank cannot map it."""
    key = f"{prefix}shm-allreduce/"
    nbytes = ShmAllReduce.segment_bytes(size)
    if rank == 0:
        ensure_pool_dir()
        path = pool_dir() / f"distserve-allreduce-{uuid.uuid4().hex}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.ftruncate(fd, nbytes)
        os.close(fd)
        store.set(f"{key}path", str(path))
    path = Path(store.get(f"{key}path").decode())
    fn = _kernel()
    mine = _join(path, nbytes, rank) if fn is not None else None
    store.set(f"{key}ok{rank}", "1" if mine is not None else "0")
    agreed = all(store.get(f"{key}ok{r}") == b"1" for r in range(size))
    if rank == 0:
        path.unlink(missing_ok=True)  # every rank has answered: those that could open it have
    if fn is None or mine is None:
        return None
    if not agreed:
        os.close(mine[0])
        return None
    return ShmAllReduce(fn, *mine, rank, size)


def _join(path: Path, nbytes: int, rank: int) -> tuple[int, mmap.mmap] | None:
    """The open file (holding this rank's lock) and its mapping, or None where this rank does not see the file
    (another host, or another /dev/shm)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    lock = _lock()
    assert lock is not None, "shm_lock is in the library _kernel() loaded"
    if os.fstat(fd).st_size != nbytes or lock(fd, rank) != 0:
        os.close(fd)
        return None
    return fd, mmap.mmap(fd, nbytes)
