"""The model's architecture, read from a Hugging Face `config.json`: the Llama family (Llama, Mistral, Qwen2/3,
Phi-3), Gemma 2/3 and OPT. Both config styles are read: transformers 5's (`rope_parameters`, `layer_types`) and
the older one published checkpoints carry (`rope_theta`, `rope_scaling`, `sliding_window_pattern`...)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from services.common.generation_config import eos_ids, read_generation_config
from services.common.mla_config import MLA_TYPES, MLAConfig, mla_config
from services.common.moe_config import MOE_TYPES, MoEConfig, moe_config

Arch = Literal["llama", "gemma", "opt"]
LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
GEMMA_TYPES = ("gemma2", "gemma3_text")
FULL, SLIDING = "full_attention", "sliding_attention"  # layer types, named as transformers names them
SERVED_DTYPES = ("float32", "bfloat16", "float16")
_DEFAULTS = {  # what transformers' config classes assume where a config.json leaves a key out
    "gemma2": {"query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
               "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh"},
    # Gemma 3's multimodal checkpoints (model_type gemma3) publish a text_config of a few keys and rely on these
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
                    "max_position_embeddings": 131072, "rope_theta": 1e6, "query_pre_attn_scalar": 256,
                    "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh", "bos_token_id": 2,
                    "eos_token_id": 1},
}
MULTIMODAL = {"gemma3": "gemma3_text"}  # served as its language model alone: model type of its text_config
SUPPORTED_TYPES = ("opt", *LLAMA_TYPES, *GEMMA_TYPES, *MULTIMODAL, *MOE_TYPES)
_TOP_KEYS = ("eos_token_id", "bos_token_id", "tie_word_embeddings", "dtype", "torch_dtype")  # kept from the top


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
    # layer type → rotary parameters (rope_theta, rope_type and its scaling keys, partial_rotary_factor)
    rope: dict[str, dict] = field(default_factory=lambda: {FULL: {"rope_theta": 10000.0}}, hash=False)
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    head_dim_override: int | None = None
    layer_types: tuple[str, ...] = ()  # FULL or SLIDING per layer; empty means every layer FULL
    sliding_window: int | None = None  # keys a sliding layer's query sees, itself included
    qk_norm: bool = False  # RMSNorm over each head's query and key before rotary (Qwen3, Gemma 3)
    hidden_act: str = "silu"  # the MLP gate's activation (GeGLU for Gemma)
    query_scale: float | None = None  # attention score scale when not head_dim ** -0.5 (Gemma)
    attn_softcap: float | None = None  # Gemma 2: scores → cap · tanh(scores / cap)
    final_softcap: float | None = None  # Gemma 2: the same on the logits
    moe: MoEConfig | None = None  # experts in place of the MLP (Mixtral, Qwen2/3-MoE, DeepSeek-V3)
    # DeepSeek-V3's latent attention; the pool then holds one "KV head" whose K and V planes are the two halves of
    # a token's latent and rotary key (num_kv_heads 1, head_dim their half), so its layout and transfers are as ever
    mla: MLAConfig | None = None
    dtype: str = "float32"  # the checkpoint's (torch_dtype; transformers 5 writes dtype): what --dtype auto serves
    next_token_layers: int = 0  # DeepSeek-V3's multi-token-prediction layers after the last (not served)

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_heads

    def layer_type(self, layer: int) -> str:
        return self.layer_types[layer] if self.layer_types else FULL

    def window(self, layer: int) -> int | None:
        """The sliding window of a layer, None for full attention."""
        return self.sliding_window if self.layer_type(layer) == SLIDING else None

    @property
    def sliding_layers(self) -> int:
        """Layers that attend to a sliding window."""
        return sum(self.window(layer) is not None for layer in range(self.num_layers))

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        model_type = raw.get("model_type", "llama")
        if model_type in MULTIMODAL:  # its language model: text_config, with what the top level says of it
            model_type = MULTIMODAL[model_type]
            raw = {**{k: raw[k] for k in _TOP_KEYS if k in raw}, **raw.get("text_config", {}), "model_type": model_type}
        dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
        if dtype not in SERVED_DTYPES:
            raise ValueError(f"config.json dtype {dtype!r} is not served; --dtype takes {', '.join(SERVED_DTYPES)}")
        if model_type == "opt":
            return _opt(raw, dtype)
        if model_type not in LLAMA_TYPES + GEMMA_TYPES + MOE_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_TYPES)}")
        gemma = model_type in GEMMA_TYPES
        raw = {**_DEFAULTS.get(model_type, {}), **raw}
        layers = raw["num_hidden_layers"]
        window = raw.get("sliding_window")
        if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not raw.get("use_sliding_window", False):
            window = None
        types = tuple(raw.get("layer_types") or _default_layer_types(raw, model_type, layers, window))
        bias = raw.get("attention_bias", raw.get("qkv_bias", model_type in ("qwen2", "qwen2_moe")))
        config = cls(
            arch="gemma" if gemma else "llama", vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"], num_layers=layers, num_heads=raw["num_attention_heads"],
            num_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            max_position=raw["max_position_embeddings"], eos_token_ids=eos_ids(raw.get("eos_token_id")),
            bos_token_id=raw.get("bos_token_id"), norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope=_rope(raw, model_type), tie_embeddings=raw.get("tie_word_embeddings", gemma),
            qkv_bias=bias, o_bias=raw.get("attention_bias", False), head_dim_override=raw.get("head_dim"),
            layer_types=types if window is not None else (FULL,) * layers,
            sliding_window=window, qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text"),
            hidden_act=raw.get("hidden_activation") or raw.get("hidden_act") or "silu",
            query_scale=raw["query_pre_attn_scalar"] ** -0.5 if gemma else None,
            attn_softcap=raw.get("attn_logit_softcapping"), final_softcap=raw.get("final_logit_softcapping"),
            moe=moe_config(raw) if model_type in MOE_TYPES else None, dtype=dtype,
            next_token_layers=raw.get("num_nextn_predict_layers") or 0,
        )
        if model_type in MLA_TYPES:
            mla = mla_config(raw)
            config = replace(config, num_kv_heads=1, head_dim_override=mla.entry // 2, mla=mla)
        return config

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelConfig:
        """config.json, with every end-of-sequence id of generation_config.json besides its own (as generate
        stops at them: instruct models end a turn with one and the text with another)."""
        raw = json.loads((Path(folder) / "config.json").read_text())
        if raw.get("quantization_config"):  # its tensors are packed or scaled: read as they are, they would be wrong
            method = raw["quantization_config"].get("quant_method", "?")
            raise ValueError(f"config.json quantization_config ({method}): quantized checkpoints are not served; "
                             "serve the unquantized (bf16, fp16 or fp32) weights")
        config = cls.from_dict(raw)
        more = eos_ids(read_generation_config(folder).get("eos_token_id"))
        return replace(config, eos_token_ids=tuple(dict.fromkeys((*config.eos_token_ids, *more))))


def _opt(raw: dict, dtype: str) -> ModelConfig:
    if raw.get("word_embed_proj_dim", raw["hidden_size"]) != raw["hidden_size"]:
        raise ValueError("OPT with word_embed_proj_dim != hidden_size is not supported")
    if not raw.get("do_layer_norm_before", True):
        raise ValueError("OPT with do_layer_norm_before=false is not supported")
    return ModelConfig(
        arch="opt", vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
        intermediate_size=raw["ffn_dim"], num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"], num_kv_heads=raw["num_attention_heads"],
        max_position=raw["max_position_embeddings"], eos_token_ids=eos_ids(raw.get("eos_token_id")),
        bos_token_id=raw.get("bos_token_id"), tie_embeddings=True, qkv_bias=True, o_bias=True, dtype=dtype,
    )


def _default_layer_types(raw: dict, model_type: str, layers: int, window: int | None) -> list[str]:
    """Layer types where the config does not list them, as transformers derives them."""
    if model_type == "gemma2":  # sliding and global in turn, sliding first
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)]
    if model_type == "gemma3_text":  # pattern - 1 sliding layers, then a global one
        pattern = raw.get("sliding_window_pattern", 6)
        return [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]
    if model_type in ("qwen2", "qwen3"):  # the layers from max_window_layers on slide
        first = raw.get("max_window_layers", layers)
        return [SLIDING if i >= first else FULL for i in range(layers)]
    return [SLIDING if window is not None else FULL] * layers  # Mistral, Phi-3: every layer or none


def _rope(raw: dict, model_type: str) -> dict[str, dict]:
    """Rotary parameters per layer type, from `rope_parameters` (per type or shared) or the older keys."""
    params = raw.get("rope_parameters")
    if params and FULL in params:  # transformers 5's Gemma 3: a set per layer type
        return {kind: _rope_set(raw, p) for kind, p in params.items() if p is not None}
    shared = params or {"rope_theta": raw.get("rope_theta", 10000.0), **(raw.get("rope_scaling") or {})}
    if "partial_rotary_factor" in raw:
        shared = {"partial_rotary_factor": raw["partial_rotary_factor"], **shared}
    rope = {FULL: _rope_set(raw, shared), SLIDING: _rope_set(raw, shared)}
    if model_type == "gemma3_text" and not params:  # the older Gemma 3 keys: a local base for sliding layers
        rope[SLIDING] = _rope_set(raw, {"rope_theta": raw.get("rope_local_base_freq", 10000.0)})
    return rope


def _rope_set(raw: dict, params: dict) -> dict:
    """One set of rotary parameters with `rope_type` named and LongRoPE's and YaRN's context lengths filled in."""
    out = {"rope_theta": 10000.0, **params}
    out["rope_type"] = out.pop("type", None) or out.get("rope_type", "default")
    if out["rope_type"] == "yarn":
        out.setdefault("max_position_embeddings", raw["max_position_embeddings"])
    if out["rope_type"] == "longrope":
        out.setdefault("original_max_position_embeddings", raw["original_max_position_embeddings"])
        out.setdefault("max_position_embeddings", raw["max_position_embeddings"])
    return out
