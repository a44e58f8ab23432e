"""CUDA IPC handles of device tensors: how a process shares its KV pool with the host's kvxfer (which opens the
handle, kvxfer/gpu.py). A rank process of a TP/PP instance exports its own pool and hands the handle to rank 0,
which registers it: a handle may be opened by any process on the host while its exporter lives.

Torch-free: it calls the tensor's own methods, so the engine (exporting) and kvxfer's client share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CudaIpcHandle:
    handle: bytes
    offset: int  # bytes from the start of the exported allocation
    device_index: int

    def to_json(self) -> str:
        return json.dumps({"handle": self.handle.hex(), "offset": self.offset, "device_index": self.device_index})

    @classmethod
    def from_json(cls, text: str | bytes) -> CudaIpcHandle:
        d = json.loads(text)
        return cls(bytes.fromhex(d["handle"]), int(d["offset"]), int(d["device_index"]))


def export_ipc(tensor) -> CudaIpcHandle:
    """The IPC handle of a CUDA torch tensor's allocation (torch's caching allocator may have put it inside a larger
    one: `offset` says where it starts)."""
    storage = tensor.untyped_storage()
    device_index, handle, _size, storage_offset, *_ = storage._share_cuda_()
    return CudaIpcHandle(bytes(handle), storage_offset + tensor.storage_offset() * tensor.element_size(), device_index)
