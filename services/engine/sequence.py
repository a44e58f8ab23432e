"""A request inside the engine: its tokens, sampling parameters, blocks and progress."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum

from services.engine.errors import EngineInputError


class SeqStatus(Enum):
    WAITING = "waiting"      # queued, holds no blocks (or was preempted and must recompute)
    RUNNING = "running"      # holds blocks, scheduled every step
    PREFILLED = "prefilled"  # prefill policy: first token sampled, blocks held until released
    FINISHED = "finished"


class FinishReason(Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise EngineInputError("max_tokens", f"must be >= 1, got {self.max_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise EngineInputError("temperature", f"must be >= 0, got {self.temperature}")
        if not (0 < self.top_p <= 1):
            raise EngineInputError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise EngineInputError("top_k", f"must be >= 0, got {self.top_k}")


@dataclass(slots=True)
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    output_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose K/V is in the cache
    status: SeqStatus = SeqStatus.WAITING
    finish_reason: FinishReason | None = None
    arrival: float = field(default_factory=time.time)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    def token_slice(self, start: int, stop: int) -> list[int]:
        prompt_len = len(self.prompt_ids)
        if stop <= prompt_len:
            return self.prompt_ids[start:stop]
        return (self.prompt_ids + self.output_ids)[start:stop]
