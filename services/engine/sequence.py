"""A request inside the engine: its tokens, blocks and progress."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from services.common.prefix_hash import extend_hashes
from services.common.sampling import FinishReason, SamplingParams, TokenLogprobs
from services.engine.grammar import GrammarState


class SeqStatus(Enum):
    WAITING = "waiting"      # queued, holds no blocks (or was preempted and must recompute)
    RUNNING = "running"      # holds blocks, scheduled every step
    PREFILLED = "prefilled"  # prefill policy: first token sampled, blocks held until released
    FINISHED = "finished"


@dataclass(slots=True)
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    output_ids: list[int] = field(default_factory=list)
    block_tables: list[list[int]] = field(default_factory=list)  # per layer group (services/engine/kv_tables.py)
    num_computed: int = 0  # tokens whose K/V is in the cache
    status: SeqStatus = SeqStatus.WAITING
    finish_reason: FinishReason | None = None
    arrival: float = field(default_factory=time.time)
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # asked: of prompt tokens 1.. computed so far
    forks: list[Sequence] = field(default_factory=list)  # choices that take this prompt's K/V once it is computed
    cache_namespace: str = ""  # prefix caching: blocks are shared only within one namespace (tenant, salt)
    block_hashes: list[int] = field(default_factory=list)  # content hashes of its first full blocks, as computed
    num_registered: int = 0  # leading blocks of its tables registered in (or found in) the prefix cache
    cacheable: bool = True  # False: its K/V came under a handle whose hashes are not its prompt's; none is registered
    num_cached: int = 0  # prompt tokens whose K/V was found in the prefix cache at admission
    grammar: GrammarState | None = None  # structured output: its matcher, in step with output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    def all_forks(self) -> list[Sequence]:
        """This sequence and the choices still waiting to fork from it."""
        return [self, *self.forks]

    def hashes(self, block_size: int, full: int) -> list[int]:
        """The content hashes of its first `full` blocks (services/common/prefix_hash.py), computed once."""
        if len(self.block_hashes) < full:
            extend_hashes(self.block_hashes, self.token_slice(0, full * block_size), block_size, self.cache_namespace, full)
        return self.block_hashes[:full]

    def token_slice(self, start: int, stop: int) -> list[int]:
        prompt_len = len(self.prompt_ids)
        if stop <= prompt_len:
            return self.prompt_ids[start:stop]
        return (self.prompt_ids + self.output_ids)[start:stop]
