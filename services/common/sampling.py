"""What a request asks of the sampler, and why a request ended: shared by every layer, torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from services.common.errors import EngineInputError

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # seeds travel as int64 on the wire
MAX_STOP_STRINGS = 4
MAX_LOGPROBS = 20
MAX_N = 16  # choices per request
GREEDY_BELOW = 1e-5  # temperatures under this sample greedily (vLLM's rule): float32 cannot scale by them
_GOLDEN = 0x9E3779B97F4A7C15  # spreads the choices' seeds over the whole range


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of an n > 1 request (the router's and a colocated instance's alike): choice 0
    keeps the request's seed (n=1 is unchanged); the others get distinct seeds derived from it."""
    if index == 0:
        return seed
    return (seed + index * _GOLDEN + 2**63) % 2**64 - 2**63  # stays an int64


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """A sampled token's log-probability under the model (before temperature, top-k, top-p), and the top ones."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


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
    stop: tuple[str, ...] = ()  # stop strings: the router ends the text at the first one (engines never see them)
    logprobs: int | None = None  # set: each sampled token's logprob, and this many top ones
    presence_penalty: float = 0.0  # subtracted from the logit of every token already generated
    frequency_penalty: float = 0.0  # subtracted once per time a token was generated
    repetition_penalty: float = 1.0  # divides (positive) or multiplies the logits of prompt and output tokens
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    min_tokens: int = 0  # EOS and stop tokens cannot be drawn before this many tokens
    prompt_logprobs: int | None = None  # set: each prompt token's logprob (from the second) and this many top ones
    skip_special_tokens: bool = True  # the output text leaves special tokens out (the router's, as `stop`)
    spaces_between_special_tokens: bool = False  # kept special tokens get a space each side (the router's)
    grammar: str = ""  # structured output: a Lark grammar the tokens must follow (services/common/grammars.py)
    resumed_tokens: int = 0  # a re-prefill: the prompt's last this many tokens are output (the grammar read them)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def processes_logits(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0
                    or self.logit_bias or self.min_tokens)

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
        if len(self.stop) > MAX_STOP_STRINGS or not all(self.stop):
            raise EngineInputError("stop", f"at most {MAX_STOP_STRINGS} non-empty strings")
        for name in ("logprobs", "prompt_logprobs"):
            k = getattr(self, name)
            if k is not None and not 0 <= k <= MAX_LOGPROBS:
                raise EngineInputError(name, f"must be in [0, {MAX_LOGPROBS}], got {k}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise EngineInputError(name, f"must be in [-2, 2], got {getattr(self, name)}")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise EngineInputError("repetition_penalty", f"must be in (0, 2], got {self.repetition_penalty}")
        if any(not 0 <= t <= INT32_MAX or not -100.0 <= b <= 100.0 for t, b in self.logit_bias):
            raise EngineInputError("logit_bias", "token ids must be >= 0 and biases in [-100, 100]")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise EngineInputError("min_tokens", f"must be in [0, max_tokens], got {self.min_tokens}")
        if self.grammar and self.min_tokens:
            raise EngineInputError("min_tokens", "cannot be combined with structured output (the grammar ends it)")
