"""`CpuLinear`: an nn.Linear whose small-batch products on CPU go through `small_gemm`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.engine.cpu import small_gemm


class CpuLinear(nn.Linear):
    """Shares the Linear's parameters; its weight is stored transposed in memory (same shape [out, in], same values).

    `weight.t()` is then a contiguous [in, out] matrix: `small_gemm` streams it row by row, and MKL, for the
    larger batches it still takes, runs its faster no-transpose GEMM on it.
    """

    @classmethod
    def replacing(cls, linear: nn.Linear) -> CpuLinear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias
        new.weight.data = new.weight.data.t().contiguous().t()
        new.weight_t = new.weight.t()  # a view: [in, out], contiguous
        new.small = small_gemm.available() and small_gemm.takes_weight(new.weight_t)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.small and small_gemm.takes_input(x):
            return small_gemm.small_gemm(x, self.weight_t, self.bias)
        return F.linear(x, self.weight, self.bias)


def use_cpu_linears(model: nn.Module) -> None:
    """Replaces every Linear of `model` by a CpuLinear, except heads that share an embedding's rows."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and id(child.weight) not in embeddings:
                setattr(parent, name, CpuLinear.replacing(child))
