"""The GPU path: pools in device memory shared by CUDA IPC, copied on the device (cupy).

Imported only for pools registered with a cuda device, so hosts without cupy never load it.
Across hosts the cupy views go to ucxx as they are: UCX sends from device memory.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence

import cupy
import numpy as np

WORD = 16  # bytes a thread moves at a time (uint4)
# Grid rows walk the KV blocks, columns their 16-byte words (grid-stride both ways): any pull is one launch.
_COPY_BLOCKS = cupy.RawKernel(r"""
extern "C" __global__ void copy_blocks(char* dst, const long long* dst_ids, const char* src,
                                       const long long* src_ids, long long n, long long words) {
    for (long long b = blockIdx.y; b < n; b += gridDim.y) {
        uint4* d = reinterpret_cast<uint4*>(dst + dst_ids[b] * words * 16);
        const uint4* s = reinterpret_cast<const uint4*>(src + src_ids[b] * words * 16);
        for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < words;
             w += (long long)gridDim.x * blockDim.x) {
            d[w] = s[w];
        }
    }
}
""", "copy_blocks")
# Grid rows walk the ranges of a re-sharding pull (or of a frame packed or unpacked), columns their 16-byte words.
_COPY_SPANS = cupy.RawKernel(r"""
extern "C" __global__ void copy_spans(char* dst, const long long* dst_at, const char* src, const long long* src_at,
                                      const long long* words, long long n) {
    for (long long r = blockIdx.y; r < n; r += gridDim.y) {
        uint4* d = reinterpret_cast<uint4*>(dst + dst_at[r]);
        const uint4* s = reinterpret_cast<const uint4*>(src + src_at[r]);
        for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < words[r];
             w += (long long)gridDim.x * blockDim.x) {
            d[w] = s[w];
        }
    }
}
""", "copy_spans")
THREADS = 256


class _Allocation:
    """Another process's allocation opened here by its IPC handle; closed once no array over it is left. Opened once
    per process: two pools may lie in one allocation, and a second open of a handle may fail (torch caches its
    opens for that reason)."""

    def __init__(self, handle: bytes, device_index: int) -> None:
        with cupy.cuda.Device(device_index):
            self.ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
        weakref.finalize(self, _close, self.ptr, device_index).atexit = False


_opened: weakref.WeakValueDictionary[tuple[bytes, int], _Allocation] = weakref.WeakValueDictionary()


def open_ipc(handle: bytes, offset: int, device_index: int, nbytes: int) -> cupy.ndarray:
    """A flat uint8 array of the pool at offset in another process's exported allocation."""
    allocation = _opened.get((handle, device_index))
    if allocation is None:
        allocation = _opened[handle, device_index] = _Allocation(handle, device_index)
    memory = cupy.cuda.UnownedMemory(allocation.ptr, offset + nbytes, owner=allocation, device_id=device_index)
    return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, offset))


def _close(ptr: int, device_index: int) -> None:
    with cupy.cuda.Device(device_index):
        cupy.cuda.runtime.ipcCloseMemHandle(ptr)


def copy_blocks(dst: cupy.ndarray, dst_ids: Sequence[int], src: cupy.ndarray, src_ids: Sequence[int],
                block_bytes: int) -> bool:
    """Copy block src_ids[i] of pool src into block dst_ids[i] of pool dst in one kernel launch, and wait for it.

    A cudaMemcpy per block costs a launch each, far more than the device needs to move a block.
    False (nothing copied) unless both pools are on one device and 16-byte aligned: copy by ranges."""
    if dst.device.id != src.device.id or block_bytes % WORD or dst.data.ptr % WORD or src.data.ptr % WORD:
        return False
    n, words = len(src_ids), block_bytes // WORD
    with cupy.cuda.Device(dst.device.id):
        ids = cupy.asarray(np.array([dst_ids, src_ids], np.int64))  # one host-to-device copy
        grid = (min(-(-words // THREADS), 1024), min(n, 65535))
        _COPY_BLOCKS(grid, (THREADS,), (dst, ids[0], src, ids[1], np.int64(n), np.int64(words)))
        cupy.cuda.get_current_stream().synchronize()
    return True


def copy_spans(dst: cupy.ndarray, dst_at: Sequence[int], src: cupy.ndarray, src_at: Sequence[int],
               lengths: Sequence[int]) -> bool:
    """Copy lengths[i] bytes at src_at[i] of src to dst_at[i] of dst in one kernel launch, and wait for it.

    False (nothing copied) unless both arrays are on one device and every address and length is a multiple of
    16 bytes: copy by views."""
    at = np.array([dst_at, src_at, lengths], np.int64).reshape(3, -1)
    if dst.device.id != src.device.id or (at % WORD).any() or dst.data.ptr % WORD or src.data.ptr % WORD:
        return False
    if not at.shape[1]:
        return True
    at[2] //= WORD
    with cupy.cuda.Device(dst.device.id):
        spans = cupy.asarray(at)  # one host-to-device copy
        grid = (min(-(-int(at[2].max()) // THREADS), 1024), min(at.shape[1], 65535))
        _COPY_SPANS(grid, (THREADS,), (dst, spans[0], src, spans[1], spans[2], np.int64(at.shape[1])))
        cupy.cuda.get_current_stream().synchronize()
    return True


def pack(pool: cupy.ndarray, offsets: Sequence[int], lengths: Sequence[int], packed_at: np.ndarray,
         out: np.ndarray) -> bool:
    """Gather the pool's ranges back to back (at packed_at) into host buffer out: one kernel into a device
    staging buffer, one copy to the host. False (nothing copied) where copy_spans declines."""
    total = int(sum(lengths))
    with cupy.cuda.Device(pool.device.id):
        staging = cupy.empty(total, cupy.uint8)
    if not copy_spans(staging, packed_at, pool, offsets, lengths):
        return False
    staging.data.copy_to_host(ctypes.c_void_p(out.ctypes.data), total)
    return True


def unpack(pool: cupy.ndarray, offsets: Sequence[int], lengths: Sequence[int], packed_at: np.ndarray,
           buf: np.ndarray) -> bool:
    """Scatter host buffer buf (ranges back to back at packed_at) into the pool's ranges: one copy to the device,
    one kernel. False (nothing copied) where copy_spans declines."""
    total = int(sum(lengths))
    with cupy.cuda.Device(pool.device.id):
        staging = cupy.empty(total, cupy.uint8)
        staging.data.copy_from_host(ctypes.c_void_p(buf.ctypes.data), total)
    return copy_spans(pool, offsets, staging, packed_at, lengths)


def copy_views(dst_views: Sequence, src_views: Sequence) -> None:
    """Copy pairwise between host (numpy) and device (cupy) views; device to device stays on the GPUs."""
    for dst, src in zip(dst_views, src_views):
        nbytes = dst.nbytes
        if isinstance(dst, np.ndarray):
            src.data.copy_to_host(ctypes.c_void_p(dst.ctypes.data), nbytes)
        elif isinstance(src, np.ndarray):
            dst.data.copy_from_host(ctypes.c_void_p(src.ctypes.data), nbytes)
        else:
            with cupy.cuda.Device(dst.device.id):
                dst.data.copy_from_device(src.data, nbytes)
    cupy.cuda.runtime.deviceSynchronize()
