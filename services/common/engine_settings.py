"""The engine's cache and batch settings, defined once: the engine, an instance, a stack and the bench inherit them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args, get_type_hints

from pydantic import Field, create_model
from pydantic_settings import BaseSettings

from services.common import defaults

OnOff = Literal["on", "off"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    block_size: int = field(default=defaults.BLOCK_SIZE, metadata={"help": "tokens per KV block"})
    num_blocks: int = field(default=defaults.NUM_BLOCKS, metadata={"help": "KV blocks in an instance's pool"})
    max_batch_tokens: int = field(default=defaults.MAX_BATCH_TOKENS,
                                  metadata={"help": "Lm for prefill; the token budget per step for colocated and chunked"})
    max_num_seqs: int = field(default=defaults.MAX_NUM_SEQS, metadata={"help": "most sequences in one batch"})
    prefix_caching: OnOff = field(default="on", metadata={
        "help": "reuse the K/V of full blocks that earlier requests computed (automatic prefix caching)"})
    dtype: Dtype = field(default="auto", metadata={
        "help": "weights, activations and K/V: auto = the checkpoint's (config.json torch_dtype), else as named"})

    def flags(self) -> list[str]:
        """The instance command-line flags that carry these settings."""
        return [arg for name, value in engine_fields(self).items() for arg in (_flag(name), str(value))]


def engine_fields(config: Any) -> dict[str, int | str]:
    """The engine settings a config carries (any config that inherits them), as keyword arguments."""
    return {f.name: getattr(config, f.name) for f in fields(EngineSettings)}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_engine_arguments(parser: argparse.ArgumentParser | Any) -> None:
    """The settings as flags (a parser or an argument group); unset ones keep their defaults."""
    hints = get_type_hints(EngineSettings)
    for f in fields(EngineSettings):
        choices = get_args(hints[f.name]) or None
        parser.add_argument(_flag(f.name), type=str if choices else int, choices=choices, default=f.default,
                            help=f.metadata["help"])


def _settings_base() -> type[BaseSettings]:
    hints = get_type_hints(EngineSettings)
    definitions: dict[str, Any] = {
        f.name: (hints[f.name], Field(f.default, description=f.metadata["help"]) if get_args(hints[f.name])
                 else Field(f.default, gt=0, description=f.metadata["help"])) for f in fields(EngineSettings)}
    return create_model("EngineSettingsFields", __base__=BaseSettings, **definitions)


EngineSettingsFields = _settings_base()
"""The same settings as pydantic-settings fields (flags and DISTSERVE_* variables of an instance)."""
