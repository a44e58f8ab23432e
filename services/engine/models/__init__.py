"""Model definitions; parameter names follow Hugging Face's so checkpoints load as they are."""

from __future__ import annotations

import torch
from torch import nn

from services.common.model_config import ModelConfig


def build_model(config: ModelConfig) -> nn.Module:
    if config.arch == "opt":
        from services.engine.models.opt import OPTForCausalLM

        return OPTForCausalLM(config)
    from services.engine.models.llama import LlamaForCausalLM

    return LlamaForCausalLM(config)


def materialize(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The model with uninitialised parameters on `device` (weights are loaded next), skipping random init."""
    with torch.device("meta"):
        model = build_model(config)
    model = model.to_empty(device=device).to(dtype)
    model.tie_weights()
    if config.arch == "llama":
        from services.engine.models.rope import inverse_frequencies

        model.model.inv_freq = inverse_frequencies(config).to(device)
    return model
