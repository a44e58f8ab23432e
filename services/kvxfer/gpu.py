"""The GPU path: pools in device memory shared by CUDA IPC, copied with cudaMemcpy (cupy).

Imported only for pools registered with a cuda device, so hosts without cupy never load it.
Across hosts the cupy views go to ucxx as they are: UCX sends from device memory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import cupy
import numpy as np


def open_ipc(handle: bytes, offset: int, device_index: int, nbytes: int) -> cupy.ndarray:
    """Open another process's exported allocation; a flat uint8 array of the pool inside it."""
    with cupy.cuda.Device(device_index):
        ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
        memory = cupy.cuda.UnownedMemory(ptr, offset + nbytes, owner=None, device_id=device_index)
        data = cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, offset))
    return data


def export_ipc(tensor) -> tuple[bytes, int, int]:
    """(IPC handle, byte offset, device index) of a CUDA torch tensor's allocation (worker side)."""
    storage = tensor.untyped_storage()
    device_index, handle, _size, storage_offset, *_ = storage._share_cuda_()
    return bytes(handle), storage_offset + tensor.storage_offset() * tensor.element_size(), device_index


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
