"""A checkpoint's generation_config.json: the end-of-sequence ids that stop generation (every one of them), and
the sampling values that requests omitting them get (`--generation-config auto`, as vLLM's)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from services.common.errors import EngineInputError
from services.common.sampling import SamplingParams

GenerationConfigSource = Literal["auto", "none"]


def read_generation_config(folder: str | Path) -> dict:
    path = Path(folder) / "generation_config.json"
    return json.loads(path.read_text()) if path.exists() else {}


def eos_ids(value: int | list[int] | None) -> tuple[int, ...]:
    """`eos_token_id` as config files write it: one id, a list, or none."""
    return tuple(value) if isinstance(value, list) else (() if value is None else (value,))


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """What a request that omits these fields samples with: the API's defaults, or the checkpoint's."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0

    @classmethod
    def from_folder(cls, folder: str | Path, source: GenerationConfigSource = "auto") -> SamplingDefaults:
        """`auto`: the values generation_config.json sets; `none`: the API's. Raises ValueError for a value no
        request could carry."""
        raw = read_generation_config(folder) if source == "auto" else {}
        defaults = cls(**{f.name: raw[f.name] for f in fields(cls) if raw.get(f.name) is not None})
        try:
            SamplingParams(temperature=defaults.temperature, top_p=defaults.top_p, top_k=defaults.top_k,
                           repetition_penalty=defaults.repetition_penalty).validate()
        except EngineInputError as exc:
            raise ValueError(f"{folder}/generation_config.json: {exc}") from None
        return defaults
