"""`rms_norm` and `silu_mul` in C for decode-sized batches on CPU (fp32): one call where torch dispatches several ops."""

from __future__ import annotations

import ctypes

import torch

from services.common.cbuild import Kernel, kernel_function
from services.engine.cpu.small_gemm import MAX_ROWS
from services.engine.cpu.team import HERE

_NORM_ARGS = (ctypes.c_void_p,) * 3 + (ctypes.c_long,) * 2 + (ctypes.c_float,)  # x, w, y, M, N, eps
_SILU_ARGS = (ctypes.c_void_p,) * 3 + (ctypes.c_long,) * 3  # gate, up, y, M, N, ld


def _norm() -> Kernel | None:
    return kernel_function("glue", "rms_norm", _NORM_ARGS, None, HERE)


def _silu() -> Kernel | None:
    return kernel_function("glue", "silu_mul", _SILU_ARGS, None, HERE)


def takes(x: torch.Tensor) -> bool:
    """Whether these kernels take `x`: fp32 on CPU, at most MAX_ROWS rows (more: torch's threaded ops), rows dense."""
    return (x.dtype == torch.float32 and x.device.type == "cpu" and x.stride(-1) == 1
            and x.numel() <= MAX_ROWS * x.shape[-1] and _norm() is not None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm over the last dimension; x contiguous (check `takes`), weight [N] fp32."""
    fn = _norm()
    assert fn is not None and x.is_contiguous(), "rms_norm: check takes() first"
    out = torch.empty_like(x)
    fn(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], eps)
    return out


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for [M, N] views with the same row stride (the halves of one product; check `takes`)."""
    fn = _silu()
    assert fn is not None and gate.stride() == up.stride() and gate.dim() == 2, "silu_mul: check takes() first"
    out = torch.empty(gate.shape, dtype=gate.dtype)
    fn(gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.shape[0], gate.shape[1], gate.stride(0))
    return out
