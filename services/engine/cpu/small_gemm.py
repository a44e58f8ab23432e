"""`small_gemm`: x @ w_t (+ bias) for a few rows of x, reading the weights once at close to memory bandwidth.

Decode is bound by reading the weights; torch's MKL reads them well below a core's memcpy bandwidth on
batch-1 to batch-32 GEMVs, this kernel close to it (`python -m benchmarks.engine` prints both).
"""

from __future__ import annotations

import ctypes

import torch

from services.common.cbuild import Kernel, kernel_function
from services.engine.cpu.team import HERE, OPENMP

MAX_ROWS = 32  # above this MKL's blocked GEMM is as fast or faster (prefill)


ARGTYPES = (ctypes.c_void_p,) * 4 + (ctypes.c_long,) * 3  # x, w_t, bias, y, M, K, N


def _function() -> Kernel | None:
    return kernel_function("small_gemm", "small_gemm", ARGTYPES, None, HERE, OPENMP)


def available() -> bool:
    return _function() is not None


def takes_dtype(weight: torch.Tensor) -> bool:
    """Whether `small_gemm` takes products with this weight once stored transposed: fp32 on CPU."""
    return weight.dtype == torch.float32 and weight.device.type == "cpu"


def takes_input(x: torch.Tensor) -> bool:
    """Whether `small_gemm` takes this input (for a weight it takes): fp32, 2-D, at most MAX_ROWS rows, contiguous."""
    return x.dim() == 2 and x.shape[0] <= MAX_ROWS and x.dtype == torch.float32 and x.is_contiguous()


def small_gemm(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x: [M, K], weight_t: [K, N] (the Linear weight transposed, contiguous), bias: [N] or None → [M, N].
    Check `takes_dtype` and `takes_input` first."""
    fn = _function()
    assert fn is not None, "small_gemm without its kernel: check available() first"
    m, k = x.shape
    n = weight_t.shape[1]
    out = torch.empty(m, n, dtype=x.dtype)
    fn(x.data_ptr(), weight_t.data_ptr(), None if bias is None else bias.data_ptr(), out.data_ptr(), m, k, n)
    return out
