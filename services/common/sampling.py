"""What a request asks of the sampler, and why a request ended: shared by every layer, torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from services.common.errors import EngineInputError

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # seeds travel as int64 on the wire
GREEDY_BELOW = 1e-5  # temperatures under this sample greedily (vLLM's rule): float32 cannot scale by them


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
