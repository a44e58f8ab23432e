"""The KV pools kvxfer has mapped: each as one flat uint8 array over the whole pool.

Host pools are /dev/shm pool files (services.common.pool_files, which confines what may be mapped); GPU pools are CUDA IPC
allocations opened with cupy (services.kvxfer.gpu, imported only for them).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.cbuild import Kernel, kernel_function
from services.common.cuda_ipc import CudaIpcHandle
from services.common.kv_layout import KVLayout
from services.common.pool_files import map_pool_file
from services.kvxfer.ranges import Ranges, block_ranges

HERE = Path(__file__).parent  # copy_ranges.c
KERNEL_FROM_RANGES = 8  # fewer ranges: a memmove each costs less than building the C loop's arrays

PAGE = 4096


@dataclass(slots=True)
class MappedPool:
    instance_id: str
    layout: KVLayout
    device: str  # "cpu" | "cuda:N"
    data: object  # [pool_bytes] uint8: numpy over the shm file, or cupy over the IPC allocation
    owner: str = ""  # the instance whose leases cover this pool (a TP/PP rank's pool); empty: instance_id

    @property
    def leased_by(self) -> str:
        return self.owner or self.instance_id

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def ranges(self, ranges: Ranges, side: str) -> PoolRanges:
        """The pool's side ("src" or "dst") of a pull's ranges."""
        return PoolRanges(self, getattr(ranges, side), ranges.length)


@dataclass(frozen=True, slots=True)
class PoolRanges:
    """The byte ranges a pull reads from (or writes into) one pool, in range order."""

    pool: MappedPool
    offsets: list[int]
    lengths: list[int]

    def view(self, i: int) -> object:
        """The pool's slice of range i (no copy)."""
        return self.pool.data[self.offsets[i]:self.offsets[i] + self.lengths[i]]

    def part(self, first: int, count: int) -> tuple[list[int], list[int]]:
        """Offsets and lengths of ranges first..first+count-1."""
        return self.offsets[first:first + count], self.lengths[first:first + count]

    def views(self) -> list:
        """The pool's slices of all ranges (no copy)."""
        return self._views(0, len(self.offsets))

    def pack(self, first: int, count: int, buf: np.ndarray) -> None:
        """Copy ranges first..first+count-1 into buf, back to back."""
        lengths = self.lengths[first:first + count]
        if self.pool.on_gpu:
            from services.kvxfer import gpu

            if not gpu.pack(self.pool.data, self.offsets[first:first + count], lengths, _packed_offsets(lengths), buf):
                copy_views(_slices(buf, lengths), self._views(first, count))
        else:
            copy_all(buf.ctypes.data, _packed_offsets(lengths), self._base, self.offsets[first:first + count], lengths)

    def unpack(self, first: int, count: int, buf: np.ndarray) -> None:
        """Copy buf, back to back, into ranges first..first+count-1."""
        lengths = self.lengths[first:first + count]
        if self.pool.on_gpu:
            from services.kvxfer import gpu

            if not gpu.unpack(self.pool.data, self.offsets[first:first + count], lengths, _packed_offsets(lengths), buf):
                copy_views(self._views(first, count), _slices(buf, lengths))
        else:
            copy_all(self._base, self.offsets[first:first + count], buf.ctypes.data, _packed_offsets(lengths), lengths)

    def _views(self, first: int, count: int) -> list:
        return [self.view(i) for i in range(first, first + count)]

    @property
    def _base(self) -> int:
        return self.pool.data.ctypes.data


def map_host(instance_id: str, layout: KVLayout, path: str) -> MappedPool:
    """Map a worker's /dev/shm pool file; its size must be the layout's pool size."""
    data = map_pool_file(path, layout.pool_bytes)
    int(data[::PAGE].sum())  # fault the mapping in now: first touches would cost a pull 7x its memcpy time
    return MappedPool(instance_id, layout, "cpu", data)


def map_cuda(instance_id: str, layout: KVLayout, device: str, ipc: CudaIpcHandle) -> MappedPool:
    from services.kvxfer import gpu

    return MappedPool(instance_id, layout, device, gpu.open_ipc(ipc.handle, ipc.offset, ipc.device_index,
                                                                layout.pool_bytes))


def host_view(view: object) -> np.ndarray:
    """A host array of a pool view: itself on the host, a copy for device memory."""
    return view if isinstance(view, np.ndarray) else view.get()


def copy_views(dst_views: Sequence, src_views: Sequence) -> None:
    """Copy pairwise (blocking: memcpy on the host, cudaMemcpy where a side is on a GPU)."""
    if all(isinstance(v, np.ndarray) for v in (*dst_views, *src_views)):
        for dst, src in zip(dst_views, src_views):
            np.copyto(dst, src)
        return
    from services.kvxfer import gpu

    gpu.copy_views(dst_views, src_views)


def copy_all(dst_base: int, dst: Sequence[int], src_base: int, src: Sequence[int], lengths: Sequence[int]) -> None:
    """Copy lengths[i] bytes from address src_base + src[i] to dst_base + dst[i] (host memory), GIL released.

    One call of the C loop in `copy_ranges.c`, so scattered blocks copy at the speed of one memcpy of the same bytes
    (a Python call per range costs a sizeable share of a block's copy). A few ranges, or no C compiler: a memmove
    per range."""
    kernel = copy_kernel() if len(lengths) >= KERNEL_FROM_RANGES else None
    if kernel is None:
        for d, s, n in zip(*(x.tolist() if isinstance(x, np.ndarray) else x for x in (dst, src, lengths))):
            ctypes.memmove(dst_base + d, src_base + s, n)
        return
    # int64 arrays pass as they are (a re-sharding pull's); lists are converted. Held until the call returns.
    dst_at, src_at, size = (np.ascontiguousarray(x, np.int64) for x in (dst, src, lengths))
    kernel(len(lengths), dst_base, dst_at.ctypes.data, src_base, src_at.ctypes.data, size.ctypes.data)


def copy_kernel() -> Kernel | None:
    """The C loop of copy_ranges.c, or None (no compiler, or C helpers off)."""
    return kernel_function("copy_ranges", "copy_ranges", (ctypes.c_int64,) + (ctypes.c_void_p,) * 5, None, HERE)


def blocks_kernel() -> Kernel | None:
    """copy_ranges.c's loop over block ids, or None (no compiler, or C helpers off)."""
    return kernel_function("copy_ranges", "copy_blocks", (ctypes.c_int64,) + (ctypes.c_void_p,) * 4 + (ctypes.c_int64,),
                           None, HERE)


def copy_blocks(src: MappedPool, dst: MappedPool, src_ids: Sequence[int], dst_ids: Sequence[int]) -> None:
    """Copy block src_ids[i] of src into block dst_ids[i] of dst (GIL released on the host).

    Host pools: the ids go to the C loop as they are, which merges runs itself; byte ranges built in Python
    (block_ranges, then their int64 arrays) cost a visible share of a 64 KB block's copy. Two pools on one
    GPU: one kernel launch (gpu.copy_blocks). Otherwise (host and device, two GPUs, no C compiler): by ranges."""
    if src.on_gpu and dst.on_gpu:
        from services.kvxfer import gpu

        if gpu.copy_blocks(dst.data, dst_ids, src.data, src_ids, src.layout.block_bytes):
            return
    kernel = None if src.on_gpu or dst.on_gpu else blocks_kernel()
    if kernel is None:
        copy_ranges(src, dst, block_ranges(src_ids, dst_ids, src.layout.block_bytes))
        return
    src_at, dst_at = np.array(src_ids, np.int64), np.array(dst_ids, np.int64)  # held until the call returns
    kernel(len(src_at), dst.data.ctypes.data, dst_at.ctypes.data, src.data.ctypes.data, src_at.ctypes.data,
           src.layout.block_bytes)


def copy_ranges(src: MappedPool, dst: MappedPool, ranges: Ranges) -> None:
    """Copy each range from the src pool to the dst pool."""
    if src.on_gpu or dst.on_gpu:
        copy_views(dst.ranges(ranges, "dst").views(), src.ranges(ranges, "src").views())
        return
    copy_all(dst.data.ctypes.data, ranges.dst, src.data.ctypes.data, ranges.src, ranges.length)


def _packed_offsets(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Where each of the lengths starts when they lie back to back."""
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _slices(buf: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Consecutive slices of buf with the given lengths."""
    return [buf[start:start + n] for start, n in zip(_packed_offsets(lengths), lengths)]
