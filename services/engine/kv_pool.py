"""The paged KV pool of one worker (layout: services.common.kv_layout), in shareable memory so the host's
kvxfer can map it."""

from __future__ import annotations

import os

import torch

from services.common.kv_layout import KVLayout
from services.common.pool_files import create_pool_file

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class KVPool:
    """Owns one worker's KV pool tensor; on CPU it is a shared /dev/shm file other processes can map."""

    def __init__(self, layout: KVLayout, device: torch.device, path: str | None = None) -> None:
        self.layout = layout
        self.device = device
        self.path = path
        dtype = DTYPES[layout.dtype]
        numel = layout.pool_bytes // layout.itemsize
        if device.type == "cpu" and path is not None:
            create_pool_file(path)  # 0600: torch would make it readable by others
            # Zero-filled by ftruncate; torch maps it MAP_SHARED so writes are visible to mappers.
            flat = torch.from_file(path, shared=True, size=numel, dtype=dtype)
        else:
            flat = torch.zeros(numel, dtype=dtype, device=device)
        self.tensor = flat.view(layout.shape)

    def close(self) -> None:
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)
