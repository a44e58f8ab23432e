"""Mixture-of-experts models of the Llama family (Mixtral, Qwen2-MoE, Qwen3-MoE): the MLP of a sparse layer is a
router and experts, each token's output the weighted sum of its top-k experts' (Qwen2-MoE adds a shared expert
behind a sigmoid gate; DeepSeek-V3 routes by grouped sigmoid scores, adds its shared experts, keeps its first
layers dense and attends by latent attention, models/mla.py). Tokens are grouped by expert, so each active expert runs one product over its tokens and
its weights are read once per step, decode steps included. Parameters are named as the checkpoint names them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata
from services.engine.models.linear import Linear
from services.engine.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP, LlamaModel, RMSNorm
from services.engine.models.mla import MLAttention
from services.engine.models.packed import PackedLinear
from services.engine.models.routing import grouped_sigmoid_top_k, softmax_top_k


class Expert(nn.Module):
    """One SwiGLU expert; `parts` names its gate, up and down projections as the checkpoint does."""

    def __init__(self, hidden: int, size: int, parts: tuple[str, str, str]) -> None:
        super().__init__()
        gate, up, self.down = parts
        self.gate_up = PackedLinear(hidden, {gate: size, up: size}, bias=False)
        setattr(self, self.down, Linear(size, hidden, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up.split(self.gate_up(x))
        return getattr(self, self.down)(F.silu(gate) * up)


class SparseMoE(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        moe = c.moe
        assert moe is not None
        self.moe = moe
        self.gate = Linear(c.hidden_size, moe.num_experts, bias=False)  # the router
        if moe.scoring == "sigmoid":  # DeepSeek-V3's per-expert bias on the scores that choose (not on the weights)
            self.gate.e_score_correction_bias = nn.Parameter(torch.zeros(moe.num_experts), requires_grad=False)
        # keyed by the global expert id, so parameter names are the checkpoint's under expert parallelism too
        self.experts = nn.ModuleDict({str(e): Expert(c.hidden_size, moe.expert_size, moe.expert_parts)
                                      for e in moe.held_experts})
        if moe.shared_size:
            setattr(self, moe.shared_name, Expert(c.hidden_size, moe.shared_size, moe.expert_parts))
        if moe.shared_gate:
            self.shared_expert_gate = Linear(c.hidden_size, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moe = self.moe
        # DeepSeek-V3 scores in float32 from the start (its reference's gate); the others' logits in the model's dtype
        logits = F.linear(x.float(), self.gate.weight.float()) if moe.scoring == "sigmoid" else self.gate(x)
        if moe.scoring == "sigmoid":
            bias = self.gate.get_parameter("e_score_correction_bias")
            weights, ids = grouped_sigmoid_top_k(logits, bias, moe.top_k, moe.groups, moe.top_groups, moe.renormalize,
                                                 moe.scaling)
        else:
            weights, ids = softmax_top_k(logits, moe.top_k, moe.renormalize)  # [T, k] each
        out = self.routed(x, weights.to(x.dtype) if moe.weights_in_dtype else weights, ids)
        if moe.shared_size:
            shared = getattr(self, moe.shared_name)(x)
            if moe.shared_gate:
                shared = torch.sigmoid(self.shared_expert_gate(x)) * shared
            out = out + shared
        return out

    def routed(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """x: [T, hidden], weights and ids: [T, k] → Σ_k weight · expert(x) [T, hidden] over the experts this rank
        holds (all on a single rank; on a rank of a TP instance its expert group's, each a slice of its width, so
        the sum is partial), one product per active expert. As transformers' grouped experts:
        each product in the wider of x's and the weights' dtype (the router's float32, or Qwen's rounded weights),
        the k summed with float32 accumulation and rounded once to x's dtype."""
        tokens, k = ids.shape
        order = ids.flatten().argsort(stable=True)  # the (token, slot) pairs grouped by expert
        ends = torch.bincount(ids.flatten(), minlength=self.moe.num_experts).cumsum(0).tolist()
        grouped = x[order // k]  # [T·k, hidden]
        ys = torch.zeros_like(grouped)  # pairs routed to another rank's experts add nothing here
        for name, expert in self.experts.items():
            e = int(name)
            start = ends[e - 1] if e else 0
            if ends[e] > start:
                ys[start : ends[e]] = expert(grouped[start : ends[e]])
        # back to (token, slot) order by the inverse permutation (a gather: index_add_ is slow on CPU), then Σ_k
        ys = ys.index_select(0, order.argsort()) * weights.flatten()[:, None]  # in the weights' dtype if wider
        return ys.view(tokens, k, -1).sum(dim=1).to(x.dtype)


class MoEDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        assert c.moe is not None
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.self_attn = MLAttention(c, layer) if c.mla is not None else LlamaAttention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        sparse = c.moe.sparse[layer]
        self.ffn = c.moe.block if sparse else "mlp"  # the checkpoint's name of the feed-forward module
        setattr(self, self.ffn, SparseMoE(c) if sparse else LlamaMLP(c))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, meta)
        return x + getattr(self, self.ffn)(self.post_attention_layernorm(x))


class MoEForCausalLM(LlamaForCausalLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, LlamaModel(config, MoEDecoderLayer))
