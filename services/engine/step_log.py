"""What each served step cost: its batch shape and wall seconds, kept in a bounded log that the Stats RPC reads.

The seconds of a step are its period in service, not only its forward pass: from the step's start to the next
step's start (scheduling, the forward pass, handing the outputs to the event loop, the commands that ran
between the two), or to the hand-off of its outputs when the engine then idles. The planner's latency model is
fitted to these records to describe the served engine (`services/common/step_model/served_fit.py`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from services.common.step_model.attended import FULL, Attended

if TYPE_CHECKING:  # the mock instances read these records without loading the engine (and torch)
    from services.engine.scheduler import SchedulerOutput

StepKind = Literal["prefill", "decode", "mixed"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    kind: StepKind  # prefill: prompt tokens only; decode: one new token per sequence; mixed: both
    seqs: int  # sequences in the batch
    tokens: int  # tokens computed
    sum_sq: int  # t2: Σ `prompt_sq` of the tokens computed per sequence (a whole prompt: its length²; a decode: 1)
    context: int  # Σ tokens attended per sequence (cached + computed)
    # both in the latency model's units: a sliding layer's attention counts its window only (`Attended`)
    start: float  # unix seconds, as the step's outputs are stamped
    seconds: float  # the step's period in service (module docstring)

    @classmethod
    def of(cls, batch: SchedulerOutput, start: float, seconds: float, attended: Attended = FULL) -> StepRecord:
        decodes = sum(1 for it in batch.items if it.num_new == 1 and it.seq.num_computed > 0)
        kind: StepKind = "decode" if decodes == len(batch.items) else "prefill" if not decodes else "mixed"
        # a prompt's suffix after a prefix-cache hit (or earlier chunks) attends to them too: t2 counts that, as
        # the planner's simulator charges it; a decoding sequence's attention is the decode terms' (by context)
        t2 = sum(1 if it.num_new == 1 and it.seq.num_computed > 0 else attended.prompt_sq(it.num_new, it.seq.num_computed)
                 for it in batch.items)
        context = sum(attended.context(it.seq.num_computed + it.num_new) for it in batch.items)
        return cls(kind, len(batch.items), batch.num_tokens, round(t2), round(context), start, seconds)


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One snapshot of an engine: its pool, its queues and (when asked) the steps it served."""

    blocks_total: int
    blocks_used: int
    blocks_reserved: int  # decode: reserved for pulls not yet admitted
    blocks_held: int  # prefill: holding K/V until pulled
    waiting: int
    running: int
    held: int  # prefill: requests whose K/V waits for a pull
    steps: int  # steps served since start
    step_log: list[StepRecord]
    blocks_cached: int = 0  # cached blocks without holders
    computed_tokens: int = 0  # tokens computed since start (cache hits are not)
    cache_queried: int = 0  # prompt tokens looked up in the prefix cache since start
    cache_hit: int = 0


class StepLog:
    """The last `maxlen` step records; written and read on the engine thread only."""

    def __init__(self, maxlen: int = 20_000) -> None:
        self._records: deque[StepRecord] = deque(maxlen=maxlen)

    def add(self, record: StepRecord) -> None:
        self._records.append(record)

    def since(self, start: float) -> list[StepRecord]:
        """Records of the steps that started at or after `start` (unix seconds)."""
        return [r for r in self._records if r.start >= start]
