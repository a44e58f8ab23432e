"""A rank's model: the architecture at its shard's size, its slices of the checkpoint, all-reduces after row splits.

Column-split projections (Q, K, V, gate, up, fc1) keep their rows of the heads or columns the rank holds;
row-split ones (o/out, down/fc2) keep the matching input columns, their bias on TP rank 0 only, and sum the
ranks' partial outputs with one all-reduce. A mixture-of-experts layer splits over the same ranks: each holds
its expert group's experts, a slice of each one's width (gate/up rows, down columns; whole experts where EP = TP),
and a slice of the shared expert's, so the layer's outputs are partial sums too and one all-reduce per layer adds
them whatever the EP.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from services.common.mla_config import MLAConfig
from services.common.model_config import ModelConfig
from services.engine.models import materialize
from services.engine.models.linear import use_small_gemm
from services.engine.models.moe import SparseMoE
from services.engine.parallel.comm import Group
from services.engine.parallel.shard import Shard
from services.engine.weights import load_weights

if TYPE_CHECKING:
    from services.engine.models import CausalLM

HEAD_ROWS = {"q_proj": "heads", "k_proj": "kv_heads", "v_proj": "kv_heads", "q_b_proj": "heads", "kv_b_proj": "heads"}
COLUMN_ROWS = ("gate_proj", "up_proj", "fc1")
ROW_SPLIT = {"o_proj": "heads", "out_proj": "heads", "down_proj": "columns", "fc2": "columns"}
_LAYER = re.compile(r"^(.*\.layers\.)(\d+)\.(.*)$")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_SHARED = re.compile(r"\.shared_experts?(_gate)?\.")
_DOWN = ("down_proj", "w2")  # an expert's row-split projection (Mixtral's w2)


class AllReduced(nn.Module):
    """A row-split projection: this rank's partial product, summed over the TP group."""

    def __init__(self, inner: nn.Module, group: Group) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(self.inner(x))


def _span(shard: Shard, kind: str, head_dim: int) -> tuple[int, int]:
    """Rows (or columns) of the full tensor this rank keeps, for a span kind."""
    if kind == "columns":
        return shard.columns.start, shard.columns.stop
    span = shard.heads if kind == "heads" else shard.kv_heads
    return span.start * head_dim, span.stop * head_dim


def _expert_part(shard: Shard, name: str, part: Any) -> tuple[str, torch.Tensor] | None:
    """A routed expert's tensor: this rank's columns of it where its expert group holds the expert, else None; the
    shared expert's: this rank's columns; the shared expert's gate: whole."""
    expert, shared = _EXPERT.search(name), _SHARED.search(name)
    if expert is not None:
        if not shard.experts.start <= int(expert.group(1)) < shard.experts.stop:
            return None
        span = shard.expert_columns
    elif shared is not None and shared.group(1):
        return name, part[:]
    else:
        span = shard.shared_columns
    module = name.rpartition(".")[0].rpartition(".")[2]
    return name, part[:, span.start : span.stop] if module in _DOWN else part[span.start : span.stop]


def shard_transform(shard: Shard, head_dim: int, mla: MLAConfig | None = None):
    """The `load_weights` transform that keeps this rank's layers and slices, its experts' included. Latent
    attention splits its heads (q, kv_b rows; o columns) and keeps the latent's projections whole on every rank."""
    widths = {} if mla is None else {"q_proj": mla.nope_dim + mla.rope_dim, "q_b_proj": mla.nope_dim + mla.rope_dim,
                                     "kv_b_proj": mla.nope_dim + mla.v_dim, "o_proj": mla.v_dim}  # per head

    def transform(name: str, part: Any) -> tuple[str, torch.Tensor] | None:
        m = _LAYER.match(name)
        if m is not None:
            index = int(m.group(2))
            if not shard.layers.start <= index < shard.layers.stop:
                return None
            name = f"{m.group(1)}{index - shard.layers.start}.{m.group(3)}"
        if _EXPERT.search(name) or _SHARED.search(name):
            return _expert_part(shard, name, part)
        if shard.tp == 1:  # whole (latent attention's projections have no per-head rows to cut by head_dim)
            return name, part[:]
        owner, _, leaf = name.rpartition(".")
        module = owner.rpartition(".")[2]
        if module in HEAD_ROWS or module in COLUMN_ROWS:
            lo, hi = _span(shard, HEAD_ROWS.get(module, "columns"), widths.get(module, head_dim))
            return name, part[lo:hi]
        if module in ROW_SPLIT:
            if leaf == "bias":
                bias = part[:]
                return name, bias if shard.tp_rank == 0 else torch.zeros_like(bias)
            lo, hi = _span(shard, ROW_SPLIT[module], widths.get(module, head_dim))
            return name, part[:, lo:hi]
        return name, part[:]

    return transform


def build_rank_model(model_dir: str | Path, config: ModelConfig, shard: Shard, device: torch.device,
                     dtype: torch.dtype, tp_group: Group) -> CausalLM:
    """This rank's model (its layers and heads; embedding and head on every stage), loaded and ready to run."""
    local = shard.local_config(config)
    model = materialize(local, device, dtype)
    load_weights(model, model_dir, shard_transform(shard, config.head_dim, config.mla))
    if shard.tp > 1:
        moe_blocks = tuple(f"{path}." for path, module in model.named_modules() if isinstance(module, SparseMoE))
        for path, module in list(model.named_modules()):
            leaf = path.rpartition(".")[2]
            if isinstance(module, SparseMoE) or (leaf in ROW_SPLIT and not path.startswith(moe_blocks)):
                parent = model.get_submodule(path.rpartition(".")[0])
                setattr(parent, leaf, AllReduced(module, tp_group))
    if device.type == "cpu":
        use_small_gemm(model)
    return model.eval()
