"""`PackedLinear`: projections that read the same input stored as one matrix (Q, K, V; gate and up).

One product instead of two or three reads the input once and dispatches once; the checkpoint keeps its
separate tensors, which `weights.py` copies into row ranges of the packed one.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from services.engine.models.linear import Linear


class PackedLinear(Linear):
    """A Linear whose output rows are the named parts, in order: part name → number of rows."""

    def __init__(self, in_features: int, parts: dict[str, int], bias: bool) -> None:
        super().__init__(in_features, sum(parts.values()), bias=bias)
        self.parts = dict(parts)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The output's parts (views along its last dimension)."""
        return y.split(list(self.parts.values()), dim=-1)


def checkpoint_slices(model: nn.Module) -> dict[str, tuple[str, int, int]]:
    """Checkpoint tensor name → (packed parameter name, first row, rows) for every part of every PackedLinear."""
    slices = {}
    for path, module in model.named_modules():
        if isinstance(module, PackedLinear):
            parent = path.rpartition(".")[0]
            for leaf, _ in module.named_parameters(recurse=False):
                start = 0
                for part, rows in module.parts.items():
                    slices[f"{parent}.{part}.{leaf}" if parent else f"{part}.{leaf}"] = (f"{path}.{leaf}", start, rows)
                    start += rows
    return slices


def checkpoint_shapes(model: nn.Module) -> Iterator[tuple[str, torch.Size]]:
    """(name, shape) of every tensor a Hugging Face checkpoint of `model` holds, packed parameters unpacked."""
    unpacked: dict[str, list[tuple[str, torch.Size]]] = {}
    for name, (packed, _, rows) in checkpoint_slices(model).items():
        param = model.get_parameter(packed)
        unpacked.setdefault(packed, []).append((name, torch.Size([rows, *param.shape[1:]])))
    for name, param in model.named_parameters():
        yield from unpacked.get(name, [(name, param.shape)])
