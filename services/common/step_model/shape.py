"""The shape of a model as the latency model and the memory estimate take it (the planner reads it from a preset
or a checkpoint folder: `services/planner/shapes.py`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from services.common import defaults
from services.common.step_model.attended import Attended


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    max_context: int
    ffn_matrices: int = 2  # 3 for a gated (SwiGLU, GeGLU) FFN
    head_size: int = 0  # a head's width where the config sets one apart from hidden / heads (Qwen3, Gemma)
    # mixture of experts: `ffn` is the width a token passes through (its top-k experts and the shared one);
    # `idle_ffn` the experts' width it does not (held in memory, not computed for that token)
    idle_ffn: int = 0
    kv_entry: int = 0  # latent attention: values per token and layer (latent + rotary key); 0: K and V heads
    attn_size: int = 0  # latent attention: parameters of one layer's attention where the GQA count does not hold
    sliding_layers: int = 0  # layers attending to their last `window` positions only (Mistral, Gemma)
    window: int = 0
    experts: int = 0  # routed experts of a sparse layer (0: a dense model)
    top_k: int = 0  # routed experts per token
    expert_ffn: int = 0  # one routed expert's intermediate width
    moe_layers: int = 0  # layers with routed experts (DeepSeek-V3's first ones are dense)
    weight_bytes: int = 2  # bytes per parameter as the checkpoint stores it (1: fp8, as DeepSeek-V3 publishes it)

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @property
    def params(self) -> int:
        """Parameter count (what memory holds): attention (q, o per query head; k, v per kv head), the FFN matrices
        (every expert), embeddings."""
        return self.active_params + self.layers * self.ffn_matrices * self.hidden * self.idle_ffn

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (all of them for a dense model)."""
        attn = self.attn_size or 2 * self.hidden * (self.heads + self.kv_heads) * self.head_dim
        return self.layers * (attn + self.ffn_matrices * self.hidden * self.ffn) + self.vocab * self.hidden

    @property
    def routed_params(self) -> int:
        """Parameters of every routed expert of every sparse layer (what expert parallelism splits)."""
        return self.moe_layers * self.experts * self.ffn_matrices * self.hidden * self.expert_ffn

    @property
    def dense_params(self) -> int:
        """Parameters every token passes through (attention, dense and shared FFNs, embeddings): all less the
        routed experts."""
        return self.params - self.routed_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of KV one token occupies across all layers (K and V heads, or latent attention's entry)."""
        return self.layers * (self.kv_entry or 2 * self.kv_heads * self.head_dim) * dtype_bytes

    def kv_tokens(self, tokens: int) -> int:
        """The K/V a sequence of `tokens` tokens keeps, in tokens of every layer: a sliding layer keeps its window
        and one block more (docs/engine.md, "KV by layer group"). Memory, transfers and decode context count it."""
        if not self.sliding_layers:
            return tokens
        kept = min(tokens, self.window + defaults.BLOCK_SIZE)
        return -(-((self.layers - self.sliding_layers) * tokens + self.sliding_layers * kept) // self.layers)

    @property
    def attended(self) -> Attended:
        """What its attention reads, per layer group: the latency terms of its sliding layers (`attended.py`)."""
        return Attended.of(self.layers, self.sliding_layers, self.window)

    def as_dict(self) -> dict:
        return asdict(self)
