"""The model's architecture, read from a Hugging Face `config.json` (Llama family and OPT)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from services.common.generation_config import eos_ids, read_generation_config

Arch = Literal["llama", "opt"]
LLAMA_TYPES = ("llama", "mistral", "qwen2")
SERVED_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    arch: Arch
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = field(default=None, hash=False)
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    head_dim_override: int | None = None
    dtype: str = "float32"  # the checkpoint's (torch_dtype; transformers 5 writes dtype): what --dtype auto serves

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        model_type = raw.get("model_type", "llama")
        eos = eos_ids(raw.get("eos_token_id"))
        dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
        if dtype not in SERVED_DTYPES:
            raise ValueError(f"config.json dtype {dtype!r} is not served; --dtype takes {', '.join(SERVED_DTYPES)}")
        if model_type == "opt":
            if raw.get("word_embed_proj_dim", raw["hidden_size"]) != raw["hidden_size"]:
                raise ValueError("OPT with word_embed_proj_dim != hidden_size is not supported")
            if not raw.get("do_layer_norm_before", True):
                raise ValueError("OPT with do_layer_norm_before=false is not supported")
            return cls(
                arch="opt", vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
                intermediate_size=raw["ffn_dim"], num_layers=raw["num_hidden_layers"],
                num_heads=raw["num_attention_heads"], num_kv_heads=raw["num_attention_heads"],
                max_position=raw["max_position_embeddings"], eos_token_ids=eos,
                bos_token_id=raw.get("bos_token_id"), tie_embeddings=True, qkv_bias=True, o_bias=True, dtype=dtype,
            )
        if model_type not in LLAMA_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}; supported: opt, {', '.join(LLAMA_TYPES)}")
        rope = raw.get("rope_parameters") or {}  # transformers 5 writes theta and scaling here
        return cls(
            arch="llama", vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"], num_layers=raw["num_hidden_layers"],
            num_heads=raw["num_attention_heads"],
            num_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            max_position=raw["max_position_embeddings"], eos_token_ids=eos,
            bos_token_id=raw.get("bos_token_id"), norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=raw.get("rope_theta", rope.get("rope_theta", 10000.0)),
            rope_scaling=raw.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None),
            tie_embeddings=raw.get("tie_word_embeddings", False),
            qkv_bias=raw.get("attention_bias", model_type == "qwen2"),
            o_bias=raw.get("attention_bias", False),
            head_dim_override=raw.get("head_dim"), dtype=dtype,
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelConfig:
        """config.json, with every end-of-sequence id of generation_config.json besides its own (as generate
        stops at them: instruct models end a turn with one and the text with another)."""
        config = cls.from_dict(json.loads((Path(folder) / "config.json").read_text()))
        more = eos_ids(read_generation_config(folder).get("eos_token_id"))
        return replace(config, eos_token_ids=tuple(dict.fromkeys((*config.eos_token_ids, *more))))
