"""The paged KV pool of one worker, in shareable memory so the host's kvxfer can map it.

Layout `[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]`: one block of one request
is one contiguous byte range across all layers, so a transfer is a list of (offset, length) ranges.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class KVLayout:
    num_blocks: int
    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float32"

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.num_blocks, self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def block_bytes(self) -> int:
        """Bytes of one block across all layers (one contiguous range in the pool)."""
        return self.num_layers * 2 * self.block_size * self.num_kv_heads * self.head_dim * self.itemsize

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    def to_dict(self) -> dict:
        return asdict(self)


class KVPool:
    """Owns one worker's KV pool tensor; on CPU it is a shared /dev/shm file other processes can map."""

    def __init__(self, layout: KVLayout, device: torch.device, path: str | None = None) -> None:
        self.layout = layout
        self.device = device
        self.path = path
        dtype = DTYPES[layout.dtype]
        numel = layout.pool_bytes // layout.itemsize
        if device.type == "cpu" and path is not None:
            # Zero-filled by ftruncate; torch maps it MAP_SHARED so writes are visible to mappers.
            flat = torch.from_file(path, shared=True, size=numel, dtype=dtype)
        else:
            flat = torch.zeros(numel, dtype=dtype, device=device)
        self.tensor = flat.view(layout.shape)

    def close(self) -> None:
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)


def map_pool(path: str, layout: KVLayout, writable: bool = True) -> torch.Tensor:
    """Map another worker's CPU pool file (kvxfer's side) as a tensor of the pool's layout."""
    dtype = DTYPES[layout.dtype]
    flat = torch.from_file(path, shared=writable, size=layout.pool_bytes // layout.itemsize, dtype=dtype)
    return flat.view(layout.shape)
