"""OPT (the DistServe paper's models): LayerNorm before each block, learned positions offset by 2, ReLU, MHA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata, AttentionSpec, paged_attention
from services.engine.kv_view import KVView
from services.engine.models.linear import Linear
from services.engine.models.packed import PackedLinear

POSITION_OFFSET = 2  # OPT's learned position table reserves its first two rows


class OPTAttention(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = c.num_heads, c.head_dim
        self.spec = AttentionSpec(c.head_dim**-0.5)
        inner = c.num_heads * c.head_dim  # the hidden size, or a TP rank's share of its heads
        self.qkv_proj = PackedLinear(c.hidden_size, {"q_proj": inner, "k_proj": inner, "v_proj": inner}, bias=True)
        self.out_proj = Linear(inner, c.hidden_size)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        tokens = x.shape[0]  # x: [T, hidden]
        shape = (tokens, self.num_heads, self.head_dim)
        q, k, v = (part.view(shape) for part in self.qkv_proj.split(self.qkv_proj(x)))
        out = paged_attention(q, k, v, cache, meta, self.spec)
        return self.out_proj(out.reshape(tokens, -1))


class OPTDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(c.hidden_size)
        self.self_attn = OPTAttention(c)
        self.final_layer_norm = nn.LayerNorm(c.hidden_size)
        self.fc1 = Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), cache, meta)
        return x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))


class OPTDecoder(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.embed_positions = nn.Embedding(c.max_position + POSITION_OFFSET, c.hidden_size)
        self.layers = nn.ModuleList(OPTDecoderLayer(c) for _ in range(c.num_layers))
        self.final_layer_norm = nn.LayerNorm(c.hidden_size)


class OPTModel(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.decoder = OPTDecoder(c)


class OPTForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = OPTModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """OPT always shares the embedding with the head (again after `to_empty`, which unties)."""
        self.lm_head.weight = self.model.decoder.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv: KVView) -> torch.Tensor:
        """input_ids, positions: [T] → hidden states [T, hidden]."""
        return self.final_norm(self.run_layers(self.embed(input_ids, positions), positions, kv))

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        decoder = self.model.decoder
        return decoder.embed_tokens(input_ids) + decoder.embed_positions(positions + POSITION_OFFSET)  # [T, hidden]

    def run_layers(self, x: torch.Tensor, positions: torch.Tensor, kv: KVView) -> torch.Tensor:
        """The decoder layers this model holds (a pipeline stage holds some): x [T, hidden] → [T, hidden]."""
        for i, layer in enumerate(self.model.decoder.layers):
            x = layer(x, *kv.layer(i))
        return x

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.decoder.final_layer_norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
