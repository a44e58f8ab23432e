"""The KV pools kvxfer has mapped: each as one flat uint8 array over the whole pool.

Host pools are /dev/shm files mapped with the engine's `map_pool`; GPU pools are CUDA IPC
allocations opened with cupy (services.kvxfer.gpu, imported only for them).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from services.engine.kv_pool import KVLayout, map_pool
from services.kvxfer.ranges import ByteRange

PAGE = 4096


@dataclass(frozen=True, slots=True)
class CudaIpc:
    handle: bytes
    offset: int
    device_index: int


@dataclass(slots=True)
class MappedPool:
    instance_id: str
    layout: KVLayout
    device: str  # "cpu" | "cuda:N"
    data: object  # [pool_bytes] uint8: numpy over the shm file, or cupy over the IPC allocation

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def views(self, ranges: Sequence[ByteRange], side: str) -> list:
        """The pool's slices for the ranges' `src` or `dst` offsets (no copy)."""
        return [self.data[getattr(r, side):getattr(r, side) + r.length] for r in ranges]


def map_host(instance_id: str, layout: KVLayout, path: str) -> MappedPool:
    """Map a worker's /dev/shm pool file; its size must be the layout's pool size."""
    if not path.startswith("/dev/shm/") or not os.path.isfile(path):
        raise ValueError(f"pool file {path!r} is not a file under /dev/shm")
    size = os.path.getsize(path)
    if size != layout.pool_bytes:
        raise ValueError(f"pool file {path} has {size} bytes, layout needs {layout.pool_bytes}")
    data = map_pool(path, layout).view(-1).view(torch.uint8).numpy()
    int(data[::PAGE].sum())  # fault the mapping in now: first touches would cost a pull 7x its memcpy time
    return MappedPool(instance_id, layout, "cpu", data)


def map_cuda(instance_id: str, layout: KVLayout, device: str, ipc: CudaIpc) -> MappedPool:
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


def copy_ranges(src: MappedPool, dst: MappedPool, ranges: Sequence[ByteRange]) -> None:
    """Copy each range from the src pool to the dst pool."""
    if src.on_gpu or dst.on_gpu:
        copy_views(dst.views(ranges, "dst"), src.views(ranges, "src"))
        return
    # memmove on raw addresses: a numpy slice and copyto per 64 KB block cost 30% of the copy's time
    src_base, dst_base = src.data.ctypes.data, dst.data.ctypes.data
    for r in ranges:
        ctypes.memmove(dst_base + r.dst, src_base + r.src, r.length)
