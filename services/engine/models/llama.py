"""Llama family (Llama 2/3, Mistral, Qwen2/3, Phi-3): RMSNorm, RoPE, grouped-query attention, SwiGLU; per layer a
sliding window where the config has one, Qwen3's per-head q/k norms. Phi-3's fused qkv and gate_up checkpoints
load into the same packed projections (weights.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata, AttentionSpec, paged_attention
from services.engine.cpu import glue
from services.engine.kv_view import KVView
from services.engine.models.linear import Linear
from services.engine.models.packed import PackedLinear
from services.engine.models.rope import apply_rotary, rope_tables

ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


class RMSNorm(nn.Module):
    """RMSNorm; with `offset` 1 the scale is (1 + weight), as Gemma stores it. In bf16/fp16 it rounds where
    transformers rounds: Gemma scales in float32 and casts, Llama normalises in float32, casts, then scales."""

    def __init__(self, dim: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps, self.offset = eps, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        if self.offset:
            return F.rms_norm(x.float(), shape, self.weight.float() + self.offset, self.eps).type_as(x)
        if x.dtype == torch.float32:
            if glue.takes(x) and x.is_contiguous():
                return glue.rms_norm(x, self.weight, self.eps)
            return F.rms_norm(x, shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), shape, None, self.eps).to(x.dtype)


def norm_offset(c: ModelConfig) -> float:
    return 1.0 if c.arch == "gemma" else 0.0


class LlamaAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.qkv_proj = PackedLinear(c.hidden_size, {"q_proj": q, "k_proj": kv, "v_proj": kv}, bias=c.qkv_bias)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.norm_eps, norm_offset(c))
            self.k_norm = RMSNorm(c.head_dim, c.norm_eps, norm_offset(c))
        self.spec = AttentionSpec(c.query_scale or c.head_dim**-0.5, c.window(layer), c.attn_softcap)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        tokens = x.shape[0]  # x: [T, hidden]
        heads = self.num_heads + self.num_kv_heads
        qk, v = self.qkv_proj(x).split([heads * self.head_dim, self.num_kv_heads * self.head_dim], -1)
        qk = qk.view(tokens, heads, self.head_dim)
        if hasattr(self, "q_norm"):
            qk = torch.cat((self.q_norm(qk[:, : self.num_heads]), self.k_norm(qk[:, self.num_heads :])), 1)
        qk = apply_rotary(qk, cos, sin)  # Q and K at once
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        out = paged_attention(q, k, v, cache, meta, self.spec)
        return self.o_proj(out.reshape(tokens, -1))


class LlamaMLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = PackedLinear(c.hidden_size, {"gate_proj": c.intermediate_size, "up_proj": c.intermediate_size}, bias=False)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.act = ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj.split(self.gate_up_proj(x))
        if self.act is F.silu and glue.takes(gate) and gate.dim() == 2:
            return self.down_proj(glue.silu_mul(gate, up))
        return self.down_proj(self.act(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.self_attn = LlamaAttention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps)
        self.mlp = LlamaMLP(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c: ModelConfig, layer_class: type[nn.Module] = LlamaDecoderLayer) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(layer_class(c, i) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.norm_eps, norm_offset(c))


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, model: LlamaModel | None = None) -> None:
        super().__init__()
        self.config = config
        self.model: LlamaModel = model or LlamaModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rope = rope_tables(config)  # float32 tables on the build device, kept out of the module's dtype casts
        self.tie_weights()

    def tie_weights(self) -> None:
        """Shares the embedding with the head when the config ties them (again after `to_empty`, which unties)."""
        if self.config.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVView) -> torch.Tensor:
        """input_ids, positions: [T] → hidden states [T, hidden]."""
        return self.final_norm(self.run_layers(self.embed(input_ids, positions), positions, kv))

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)  # [T, hidden]

    def run_layers(self, x: torch.Tensor, positions: torch.Tensor, kv: KVView) -> torch.Tensor:
        """The decoder layers this model holds (a pipeline stage holds some): x [T, hidden] → [T, hidden]."""
        rotary = {kind: tuple(t.to(x.dtype) for t in table.cos_sin(positions, kv.meta))  # as transformers casts
                  for kind, table in self.rope.items()}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, *rotary[self.config.layer_type(i)], *kv.layer(i))
        return x

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
