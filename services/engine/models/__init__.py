"""Model definitions; parameter names follow Hugging Face's so checkpoints load as they are."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch.nn import init

from services.common.model_config import ModelConfig

if TYPE_CHECKING:
    from services.engine.models.llama import LlamaForCausalLM
    from services.engine.models.opt import OPTForCausalLM

    CausalLM = LlamaForCausalLM | OPTForCausalLM


def build_model(config: ModelConfig) -> CausalLM:
    if config.arch == "opt":
        from services.engine.models.opt import OPTForCausalLM

        return OPTForCausalLM(config)
    if config.arch == "gemma":
        from services.engine.models.gemma import GemmaForCausalLM

        return GemmaForCausalLM(config)
    from services.engine.models.llama import LlamaForCausalLM

    return LlamaForCausalLM(config)


_INITS = ("normal_", "uniform_", "kaiming_uniform_", "xavier_uniform_", "trunc_normal_", "zeros_", "ones_")


@contextmanager
def _no_random_init() -> Iterator[None]:
    """Modules built here keep their parameters as allocated (the weights are loaded next). Building on the
    meta device instead would pull in torch's symbolic-shape machinery (sympy) at each process start: seconds
    of a restarted instance's recovery."""
    saved = {name: getattr(init, name) for name in _INITS}
    for name in _INITS:
        setattr(init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


def materialize(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> CausalLM:
    """The model with uninitialised parameters on `device` (weights are loaded next), skipping random init."""
    with torch.device(device), _no_random_init():
        model = build_model(config)
    model = model.to(dtype)
    model.tie_weights()
    return model
