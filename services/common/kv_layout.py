"""The paged KV pool's layout, shared by the engine (which owns the pool) and kvxfer (which moves its bytes).

Layout `[num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim]`: one block of one request is one
contiguous byte range across all layers, so a transfer is a list of (offset, length) ranges. Inside a block the
KV heads come before the token slots (vLLM's "HND"), so a run of heads of one layer's K or V is one range of
block_size rows: a pull between TP degrees (each rank holding some heads) moves ranges block_size times larger
than with the slots first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
HEAD_AXIS = 3  # the KV heads' axis of `KVLayout.shape`


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
        return (self.num_blocks, self.num_layers, 2, self.num_kv_heads, self.block_size, self.head_dim)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def block_bytes(self) -> int:
        """Bytes of one block across all layers (one contiguous range in the pool)."""
        return self.num_layers * 2 * self.block_size * self.num_kv_heads * self.head_dim * self.itemsize

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    def to_dict(self) -> dict:
        return asdict(self)
