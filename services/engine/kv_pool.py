"""The paged KV pool of one worker (layout: services.common.kv_layout), in shareable memory so the host's kvxfer can
map it; `site` describes it (services.common.pool_site)."""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from services.common.cuda_ipc import export_ipc
from services.common.kv_layout import KVLayout
from services.common.pool_files import create_pool_file
from services.common.pool_site import PoolSite
from services.common.span import Span

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class KVPool:
    """Owns one worker's KV pool tensor; on CPU it is a shared /dev/shm file other processes can map."""

    def __init__(self, layout: KVLayout, device: torch.device, path: str | None = None,
                 layers: Span | None = None, kv_heads: Span | None = None) -> None:
        """`layers`, `kv_heads`: what of the model it holds (by default, as many layers as the layout has slots
        and every head: a one-group model's whole pool)."""
        self._site = PoolSite(layout, layers or Span(0, layout.num_layers), kv_heads or Span(0, layout.num_kv_heads),
                              str(device), path)
        dtype = DTYPES[layout.dtype]
        numel = layout.pool_bytes // layout.itemsize
        if device.type == "cpu" and path is not None:
            create_pool_file(path)  # 0600: torch would make it readable by others
            # Zero-filled by ftruncate; torch maps it MAP_SHARED so writes are visible to mappers.
            flat = torch.from_file(path, shared=True, size=numel, dtype=dtype)
        else:
            flat = torch.zeros(numel, dtype=dtype, device=device)
        self.tensor = flat.view(layout.shape)

    @property
    def site(self) -> PoolSite:
        """Its site; a GPU pool's CUDA IPC handle is exported the first time it is asked (kvxfer registers it), so a
        pool no kvxfer maps is never exported."""
        if self.tensor.is_cuda and self._site.cuda_ipc is None:
            self._site = replace(self._site, cuda_ipc=export_ipc(self.tensor))
        return self._site

    def close(self) -> None:
        if self._site.path is not None and os.path.exists(self._site.path):
            os.unlink(self._site.path)
