"""`paged_decode_attention`: decode attention over the paged K/V pool without gathering it (CPU, fp32)."""

from __future__ import annotations

import ctypes

import torch

from services.common.cbuild import Kernel, kernel_function
from services.engine.cpu.team import HERE, OPENMP

# q, cache, table, lens, out; sizes; scale, window, softcap
ARGTYPES = (ctypes.c_void_p,) * 5 + (ctypes.c_long,) * 7 + (ctypes.c_float, ctypes.c_long, ctypes.c_float)


def _function() -> Kernel | None:
    return kernel_function("paged_attention", "paged_decode_attention", ARGTYPES, ctypes.c_int, HERE, OPENMP)


def available() -> bool:
    return _function() is not None


def takes(q: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the kernel takes this call: fp32 on CPU, each block of the layer laid out densely."""
    if _function() is None or q.dtype != torch.float32 or cache.dtype != torch.float32 or q.device.type != "cpu":
        return False
    _, two, kvh, bs, d = cache.shape
    return cache.stride()[1:] == (kvh * bs * d, bs * d, d, 1)


def paged_decode_attention(q: torch.Tensor, cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor,
                           scale: float, window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """q: [B, H, D]; cache: one layer of the pool [N, 2, KVH, bs, D]; table: [B, nb] int64; lens: [B] int64
    (context after this step) → [B, H, D]; with `window` only the last `window` keys, with `softcap` the scores
    capped. Check `takes` first."""
    batch, heads, d = q.shape
    _, _, kvh, bs, _ = cache.shape
    q, table, lens = q.contiguous(), table.contiguous(), lens.contiguous()
    out = torch.empty_like(q)
    fn = _function()
    assert fn is not None, "paged_decode_attention without its kernel: check takes() first"
    rc = fn(q.data_ptr(), cache.data_ptr(), table.data_ptr(), lens.data_ptr(), out.data_ptr(),
            batch, heads, kvh, d, bs, table.shape[1], cache.stride(0), scale, window or 0, softcap or 0.0)
    if rc != 0:
        raise MemoryError("paged_decode_attention: no memory for the score buffer")
    return out
