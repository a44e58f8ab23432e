"""Checkpoints written by transformers' own classes (`save_pretrained`), seeded random weights: a preset's
config in any dtype, sharded with an index when `max_shard_size` asks, with the presets' tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from services.engine.make_model import write_tokenizer
from services.engine.preset_configs import PRESETS


def save_hf_checkpoint(out: Path, preset: str = "tiny-llama", dtype: torch.dtype = torch.bfloat16,
                       max_shard_size: str = "100KB", seed: int = 0, **overrides) -> Path:
    import transformers

    raw = {k: v for k, v in {**PRESETS[preset], **overrides}.items() if k != "torch_dtype"}
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).to(dtype)
    model.save_pretrained(out, max_shard_size=max_shard_size)
    write_tokenizer(out, config.vocab_size)
    return out
