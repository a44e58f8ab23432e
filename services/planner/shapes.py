"""Model shapes the latency model and the memory estimate need, from a preset name or a Hugging Face folder.

The engine team will later point `PRESETS` at the engine's own presets; the planner only needs these fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

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

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @property
    def params(self) -> int:
        """Parameter count: attention (q, o per query head; k, v per kv head), the FFN matrices, embeddings."""
        attn = 2 * self.hidden * (self.heads + self.kv_heads) * self.head_dim
        return self.layers * (attn + self.ffn_matrices * self.hidden * self.ffn) + self.vocab * self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of K and V one token occupies across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

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
    return ModelShape(
        name=name, hidden=c.hidden_size, layers=c.num_layers, heads=c.num_heads, kv_heads=c.num_kv_heads,
        ffn=c.intermediate_size, vocab=c.vocab_size, max_context=c.max_position, ffn_matrices=2 if c.arch == "opt" else 3,
        head_size=0 if c.head_dim == c.hidden_size // c.num_heads else c.head_dim,
    )


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
