"""The `ModelShape` of a preset name or a Hugging Face folder (the shape itself: `services.common.step_model.shape`).

The presets are the engine's (`make-model`), and published models too large to make here that the planner plans
for from their config.json alone (`PUBLISHED`, in data/).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from services.common.mla_config import MLAConfig
from services.common.model_config import ModelConfig
from services.common.step_model.shape import ModelShape
from services.engine.presets import PRESETS as ENGINE_PRESETS

DATA = Path(__file__).parent / "data"


def shape_from_config(config: dict, name: str) -> ModelShape:
    """Read a Hugging Face `config.json`: as the engine reads it where it names its model_type (every family, a
    multimodal checkpoint's language model, the defaults transformers assumes), else by its Llama or OPT keys."""
    if "model_type" in config:
        fp8 = (config.get("quantization_config") or {}).get("quant_method") == "fp8"
        return replace(_shape_of(ModelConfig.from_dict(config), name), weight_bytes=1 if fp8 else 2)
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
        sliding_layers=c.sliding_layers, window=c.sliding_window or 0,
    )
    if c.moe is not None:  # the sparse layers' active width; the idle experts averaged over all layers
        moe = c.moe
        idle = (moe.num_experts - moe.top_k) * moe.expert_size * sum(moe.sparse) // len(moe.sparse)
        shape = replace(shape, ffn=moe.top_k * moe.expert_size + moe.shared_size, idle_ffn=idle,
                        experts=moe.num_experts, top_k=moe.top_k, expert_ffn=moe.expert_size, moe_layers=sum(moe.sparse))
    if c.mla is not None:  # the pool's one "head" of half an entry is the engine's view; the planner counts the entry
        # a head's width: the mean of its query-key and value widths, what prefill's attention computes per position
        width = (c.mla.nope_dim + c.mla.rope_dim + c.mla.v_dim) // 2
        shape = replace(shape, kv_heads=c.num_heads, head_size=width, kv_entry=c.mla.entry,
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


PUBLISHED = ("deepseek-v3", "mixtral-8x7b")  # planner-only shapes: a published config.json in data/, no checkpoint to make
PRESETS: dict[str, ModelShape] = {
    **{name: shape_from_config(config, name) for name, config in ENGINE_PRESETS.items()},
    **{name: shape_from_config(json.loads((DATA / f"{name}-config.json").read_text()), name) for name in PUBLISHED},
}
