"""Gemma 2 and Gemma 3 (text): the Llama blocks with (1 + w) RMSNorm, a norm before and after both attention and
MLP, embeddings scaled by √hidden, GeGLU, query_pre_attn_scalar, sliding and global layers interleaved (Gemma 3's
sliding layers with their own rotary base), and Gemma 2's soft-capped scores and logits."""

from __future__ import annotations

import torch
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata
from services.engine.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP, LlamaModel, RMSNorm


class GemmaDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.norm_eps, 1.0)
        self.self_attn = LlamaAttention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.norm_eps, 1.0)
        self.pre_feedforward_layernorm = RMSNorm(c.hidden_size, c.norm_eps, 1.0)
        self.mlp = LlamaMLP(c)
        self.post_feedforward_layernorm = RMSNorm(c.hidden_size, c.norm_eps, 1.0)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, cache, meta))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class GemmaForCausalLM(LlamaForCausalLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, LlamaModel(config, GemmaDecoderLayer))

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)  # [T, hidden]
        return x * torch.tensor(self.config.hidden_size**0.5, dtype=x.dtype)  # rounded to the dtype, as Gemma does

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        cap = self.config.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap
