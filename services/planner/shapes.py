"""Model shapes the latency model and the memory estimate need, from a preset name or a Hugging Face folder.

The engine team will later point `PRESETS` at the engine's own presets; the planner only needs these fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


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

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """Parameter count: attention (q, o full; k, v per kv head), two FFN matrices, embeddings."""
        attn = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * self.head_dim
        return self.layers * (attn + 2 * self.hidden * self.ffn) + self.vocab * self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of K and V one token occupies across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def as_dict(self) -> dict:
        return asdict(self)


def _opt(name: str, hidden: int, layers: int, heads: int) -> ModelShape:
    return ModelShape(name, hidden, layers, heads, heads, 4 * hidden, 50272, 2048)


PRESETS: dict[str, ModelShape] = {
    "opt-13b": _opt("opt-13b", 5120, 40, 40),
    "opt-66b": _opt("opt-66b", 9216, 64, 72),
    "opt-175b": _opt("opt-175b", 12288, 96, 96),
    "llama-3-8b": ModelShape("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
    "tiny-llama": ModelShape("tiny-llama", 64, 2, 4, 2, 128, 512, 512),
    "small-llama": ModelShape("small-llama", 512, 8, 8, 4, 1408, 32000, 2048),
    "tiny-opt": ModelShape("tiny-opt", 64, 2, 4, 4, 256, 512, 512),
}


def shape_from_config(config: dict, name: str) -> ModelShape:
    """Read a Hugging Face `config.json` (Llama or OPT keys)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    ffn = config.get("intermediate_size", config.get("ffn_dim"))
    if ffn is None:
        raise ValueError("config.json has neither intermediate_size nor ffn_dim")
    return ModelShape(
        name=name, hidden=hidden, layers=int(config["num_hidden_layers"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads), ffn=int(ffn),
        vocab=int(config.get("vocab_size", 32000)),
        max_context=int(config.get("max_position_embeddings", 2048)),
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
