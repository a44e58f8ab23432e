"""A request inside the engine: its tokens, sampling parameters, blocks and progress."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum

from services.engine.errors import EngineInputError


INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # seeds travel as int64 on the wire
GREEDY_BELOW = 1e-5  # temperatures under this sample greedily (vLLM's rule): float32 cannot scale by them


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

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise EngineInputError("max_tokens", f"must be >= 1, got {self.max_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise EngineInputError("temperature", f"must be >= 0, got {self.temperature}")
        if not (0 < self.top_p <= 1):
            raise EngineInputError("top_p", f"must be in (0, 1], got {self.top_p}")
        if not 0 <= self.top_k <= INT32_MAX:
            raise EngineInputError("top_k", f"must be in [0, {INT32_MAX}], got {self.top_k}")
        if self.seed is not None and not INT64_MIN <= self.seed <= INT64_MAX:
            raise EngineInputError("seed", f"must be in [{INT64_MIN}, {INT64_MAX}], got {self.seed}")
        if any(not 0 <= t <= INT32_MAX for t in self.stop_token_ids):
            raise EngineInputError("stop_token_ids", f"ids must be in [0, {INT32_MAX}]")


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
