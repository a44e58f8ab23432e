"""Llama family (Llama 2/3, Mistral, Qwen2): RMSNorm, RoPE, grouped-query attention, SwiGLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata, paged_attention
from services.engine.models.linear import Linear
from services.engine.models.packed import PackedLinear
from services.engine.models.rope import (
    apply_rotary,
    inverse_frequencies,
    rotary_cos_sin,
)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class LlamaAttention(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.qkv_proj = PackedLinear(c.hidden_size, {"q_proj": q, "k_proj": kv, "v_proj": kv}, bias=c.qkv_bias)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        tokens = x.shape[0]  # x: [T, hidden]
        qk, v = self.qkv_proj(x).split([(self.num_heads + self.num_kv_heads) * self.head_dim, self.num_kv_heads * self.head_dim], -1)
        qk = apply_rotary(qk.view(tokens, self.num_heads + self.num_kv_heads, self.head_dim), cos, sin)  # Q and K at once
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        out = paged_attention(q, k, v, cache, meta, self.head_dim**-0.5)
        return self.o_proj(out.reshape(tokens, -1))


class LlamaMLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = PackedLinear(c.hidden_size, {"gate_proj": c.intermediate_size, "up_proj": c.intermediate_size}, bias=False)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj.split(self.gate_up_proj(x))
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.mlp = LlamaMLP(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    inv_freq: torch.Tensor  # a buffer: RoPE's inverse frequencies [head_dim / 2]

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.norm_eps)
        self.register_buffer("inv_freq", inverse_frequencies(c), persistent=False)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Shares the embedding with the head when the config ties them (again after `to_empty`, which unties)."""
        if self.config.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_pool: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """input_ids, positions: [T]; kv_pool: [N, layers, 2, KVH, bs, D] → hidden states [T, hidden]."""
        return self.final_norm(self.run_layers(self.embed(input_ids, positions), positions, kv_pool, meta))

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)  # [T, hidden]

    def run_layers(self, x: torch.Tensor, positions: torch.Tensor, kv_pool: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """The decoder layers this model holds (a pipeline stage holds some): x [T, hidden] → [T, hidden]."""
        cos, sin = (t.to(x.dtype) for t in rotary_cos_sin(positions, self.model.inv_freq))  # as transformers casts
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, kv_pool[:, i], meta)
        return x

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
