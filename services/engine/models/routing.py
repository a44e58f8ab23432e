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


def grouped_sigmoid_top_k(logits: torch.Tensor, bias: torch.Tensor, k: int, groups: int, top_groups: int,
                          renormalize: bool, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3: logits [T, E] → weights [T, k] (float32), expert ids [T, k]. Experts are chosen by sigmoid score
    plus the correction bias, among the `top_groups` groups whose two best such scores sum highest; their weights
    are the scores without the bias, renormalised where configured, times `scaling`."""
    scores = logits.float().sigmoid()
    choice = scores + bias.float()
    group_scores = choice.view(len(choice), groups, -1).topk(2, dim=-1)[0].sum(dim=-1)  # [T, groups]
    kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, group_scores.topk(top_groups, dim=-1)[1], True)
    choice = choice.masked_fill(~kept.repeat_interleave(choice.shape[1] // groups, dim=1), float("-inf"))
    ids = choice.topk(k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scaling, ids
