"""`Linear`: nn.Linear whose small-batch products on CPU go through `small_gemm` once prepared for it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.engine.cpu import small_gemm


class Linear(nn.Linear):
    """nn.Linear (same parameters, same names); after `use_small_gemm`, decode-sized batches on CPU run
    `small_gemm` over the weight stored transposed in memory (same shape [out, in], same values)."""

    small = False
    weight_t: torch.Tensor | None = None  # a contiguous [in, out] view of the weight, once transposed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.small and self.weight_t is not None and small_gemm.takes_input(x):
            return small_gemm.small_gemm(x, self.weight_t, self.bias)
        return F.linear(x, self.weight, self.bias)

    def use_small_gemm(self) -> None:
        # Transposed storage also suits MKL, which runs its faster no-transpose GEMM for the larger batches. Only
        # for weights small_gemm takes (fp32): a bf16/fp16 product's rounding can depend on the weight's layout
        # (AVX2 hosts), and transformers' is the row-major one.
        if not (small_gemm.available() and small_gemm.takes_dtype(self.weight)):
            return
        self.weight.data = self.weight.data.t().contiguous().t()
        self.weight_t = self.weight.t()
        self.small = True


def use_small_gemm(model: nn.Module) -> None:
    """Prepares every Linear of `model` for `small_gemm`, except heads that share an embedding's rows."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, Linear) and id(module.weight) not in embeddings:
            module.use_small_gemm()
