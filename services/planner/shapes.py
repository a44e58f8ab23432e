"""Model shapes the latency model and the memory estimate need, from a preset name or a Hugging Face folder.

The engine team will later point `PRESETS` at the engine's own presets; the planner only needs these fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from services.common.mla_config import MLAConfig
from services.common.model_config import ModelConfig
from services.engine.presets import PRESETS as ENGINE_PRESETS


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

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of KV one token occupies across all layers (K and V heads, or latent attention's entry)."""
        return self.layers * (self.kv_entry or 2 * self.kv_heads * self.head_dim) * dtype_bytes

    def as_dict(self) -> dict:
        return asdict(self)


def shape_from_config(config: dict, name: str) -> ModelShape:
    """Read a Hugging Face `config.json`: as the engine reads it where it names its model_type (every family, a
    multimodal checkpoint's language model, the defaults transformers assumes), else by its Llama or OPT keys."""
    if "model_type" in config:
        return _shape_of(ModelConfig.from_dict(config), name)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    gated = "intermediate_size" in config  # Llama keys; OPT has ffn_dim and a plain two-matrix FFN
    ffn = config["intermediate_size"] if gated else config.get("ffn_dim")
    if ffn is None:
        raise ValueError("model: config.json has neither intermediate_size nor ffn_dim")
    return ModelShape(
        name=name, hidden=hidden, layers=int(config["num_hidden_layers"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads), ffn=int(ffn),
        vocab=int(config.get("vocab_size", 32000)),
        max_context=int(config.get("max_position_embeddings", 2048)), ffn_matrices=3 if gated else 2,
        head_size=0 if head_dim == hidden // heads else head_dim,  # 0 where it says what hidden / heads says
    )


def _shape_of(c: ModelConfig, name: str) -> ModelShape:
    shape = ModelShape(
        name=name, hidden=c.hidden_size, layers=c.num_layers, heads=c.num_heads, kv_heads=c.num_kv_heads,
        ffn=c.intermediate_size, vocab=c.vocab_size, max_context=c.max_position, ffn_matrices=2 if c.arch == "opt" else 3,
        head_size=0 if c.head_dim == c.hidden_size // c.num_heads else c.head_dim,
    )
    if c.moe is not None:  # the sparse layers' active width; the idle experts averaged over all layers
        moe = c.moe
        idle = (moe.num_experts - moe.top_k) * moe.expert_size * sum(moe.sparse) // len(moe.sparse)
        shape = replace(shape, ffn=moe.top_k * moe.expert_size + moe.shared_size, idle_ffn=idle)
    if c.mla is not None:  # the pool's one "head" of half an entry is the engine's view; the planner counts the entry
        shape = replace(shape, kv_heads=c.num_heads, head_size=0, kv_entry=c.mla.entry,
                        attn_size=_mla_params(c.mla, c.hidden_size, c.num_heads))
    return shape


def _mla_params(m: MLAConfig, hidden: int, heads: int) -> int:
    """One latent attention layer: the query (low-rank or not), kv_a, kv_b and o projections."""
    qk = m.nope_dim + m.rope_dim
    query = hidden * m.q_lora_rank + m.q_lora_rank * heads * qk if m.q_lora_rank else hidden * heads * qk
    return query + hidden * m.entry + m.kv_lora_rank * heads * (m.nope_dim + m.v_dim) + heads * m.v_dim * hidden


def load_shape(model: str) -> ModelShape:
    """A preset name (`opt-13b`) or a folder holding config.json."""
    if model in PRESETS:
        return PRESETS[model]
    path = Path(model)
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.is_file():
        raise ValueError(f"model: {model!r} is neither a preset ({', '.join(PRESETS)}) nor a model folder")
    return shape_from_config(json.loads(config_file.read_text()), path.name)


PRESETS: dict[str, ModelShape] = {name: shape_from_config(config, name) for name, config in ENGINE_PRESETS.items()}
