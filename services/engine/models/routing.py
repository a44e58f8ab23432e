"""Routing functions of mixture-of-experts layers: each token's top-k experts and the weights of their outputs,
computed in float32 as transformers computes them."""

from __future__ import annotations

import torch


def softmax_top_k(logits: torch.Tensor, k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral, Qwen2/3-MoE: logits [T, E] → weights [T, k] (float32), expert ids [T, k]."""
    weights, ids = torch.softmax(logits.float(), dim=-1).topk(k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids
