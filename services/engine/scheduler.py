"""Scheduler policies: which sequences run this step, and how many of their tokens.

A step computes some of each scheduled sequence's uncomputed tokens; when a sequence's tokens are all
computed, it samples the next one. Prefill, decode, colocated (vLLM-style) and chunked (Sarathi-style)
differ only in `schedule()`. Preemption frees a sequence's blocks and recomputes it later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

from services.common import defaults
from services.common.sampling import FinishReason, TokenLogprobs
from services.engine.block_manager import BlockManager, CacheCounters
from services.engine.finish import FinishRule
from services.engine.kv_tables import KVTables
from services.engine.sampler import Sampled
from services.engine.sequence import SeqStatus, Sequence

Policy = Literal["prefill", "decode", "colocated", "chunked"]


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new: int  # tokens to compute this step, from seq.num_computed

    @property
    def samples(self) -> bool:
        return self.seq.num_computed + self.num_new == self.seq.num_tokens

    @property
    def reach(self) -> int:
        """The longer of the prompt and the tokens computed after this step: LongRoPE picks its factors by it, as
        transformers does by the length of each forward pass (the whole prompt, then one more token a step)."""
        return max(len(self.seq.prompt_ids), self.seq.num_computed + self.num_new)


@dataclass(slots=True)
class SchedulerOutput:
    items: list[ScheduledSeq]

    @property
    def is_decode(self) -> bool:
        return all(it.num_new == 1 and it.seq.num_computed > 0 for it in self.items)

    @property
    def num_tokens(self) -> int:
        return sum(it.num_new for it in self.items)


@dataclass(slots=True)
class Advanced:
    """A sequence that sampled a token in the step; `finish_reason` set when that ended it."""

    seq: Sequence
    token: int
    logprobs: TokenLogprobs | None
    finish_reason: FinishReason | None


@dataclass(slots=True)
class SchedulerConfig:
    max_batch_tokens: int = defaults.MAX_BATCH_TOKENS
    max_num_seqs: int = defaults.MAX_NUM_SEQS
    max_model_len: int = 2048


class Scheduler:
    """Queues and blocks common to all policies; subclasses decide `schedule()`."""

    def __init__(self, kv: KVTables, config: SchedulerConfig) -> None:
        self.kv = kv
        self.blocks: BlockManager = kv.blocks
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache = CacheCounters()  # prompt tokens looked up in the prefix cache at admission, and found

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A sequence whose K/V is already in its blocks (decode: pulled from a prefill instance)."""
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)
        self._register(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """The sequences to run this step and how many tokens of each."""
        raise NotImplementedError

    def _grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Gives `seq` blocks for `num_tokens` tokens if the pool can; False if not."""
        if not seq.block_tables:
            seq.block_tables = self.kv.empty()
        return self.kv.grow(seq.block_tables, num_tokens)

    def free(self, seq: Sequence) -> None:
        if seq.block_tables:
            self.kv.free(seq.block_tables)
        seq.block_tables = []
        seq.num_registered = 0

    def _start_cached(self, seq: Sequence) -> None:
        """A sequence without blocks starts on the cached blocks of its longest cached prefix (at least its last
        token is computed, to sample from). Prompt logprobs ask for every position, so they skip the cache."""
        if seq.block_tables or not self.blocks.caching or seq.params.prompt_logprobs is not None:
            return
        bs = self.blocks.block_size
        prefix = self.kv.match(seq.hashes(bs, (seq.num_tokens - 1) // bs))
        seq.block_tables = prefix.tables if prefix.num_blocks else []
        seq.num_registered = prefix.num_blocks
        seq.num_computed = seq.num_registered * bs

    def _drop_cached(self, seq: Sequence) -> None:
        """Undoes `_start_cached` for a sequence that goes on waiting."""
        self.free(seq)
        seq.num_computed = 0

    def _register(self, seq: Sequence) -> None:
        """Registers the blocks that its computed tokens filled since the last call, then lets go of those that
        its sliding layers no longer read."""
        bs = self.blocks.block_size
        full = min(seq.num_computed // bs, len(seq.block_tables[0]) if seq.block_tables else 0)
        if self.blocks.caching and seq.cacheable and full > seq.num_registered:
            self.kv.register(seq.block_tables, seq.hashes(bs, full), seq.num_registered)
            seq.num_registered = full
        if seq.block_tables:
            self.kv.trim(seq.block_tables, seq.num_computed)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.free(seq)
        seq.num_computed = 0
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)

    def _admit(self, budget: int, chunk: bool) -> list[ScheduledSeq]:
        """FCFS from the waiting queue within a token budget.

        Whole prompts: a prompt longer than the budget runs alone. Chunks: the budget cuts the last one.
        """
        items: list[ScheduledSeq] = []
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            self._start_cached(seq)
            take = min(seq.num_uncomputed, budget) if chunk else seq.num_uncomputed
            if (items and take > budget) or not self._grow(seq, seq.num_computed + take):
                self._drop_cached(seq)
                break  # FCFS: the head waits (for the budget or for blocks), nothing overtakes it
            self._count_cached(seq)
            self.waiting.popleft()
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            items.append(ScheduledSeq(seq, take))
            budget -= take
        return items

    def _count_cached(self, seq: Sequence) -> None:
        """An admitted sequence's prefix-cache lookup, counted once: its prompt on the first admission."""
        if seq.output_ids or not self.blocks.caching:
            return
        seq.num_cached = min(seq.num_computed, len(seq.prompt_ids))
        self.cache.queried += len(seq.prompt_ids)
        self.cache.hit += seq.num_cached

    def _continue_running(self, budget: int) -> list[ScheduledSeq]:
        """Advance running sequences (a decode token, or the next prompt chunk), preempting the newest when blocks run out."""
        items: list[ScheduledSeq] = []
        for seq in list(self.running):
            take = min(seq.num_uncomputed, budget)
            if seq.status is not SeqStatus.RUNNING or take <= 0:
                continue
            while not self._grow(seq, seq.num_computed + take):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is SeqStatus.RUNNING:
                items.append(ScheduledSeq(seq, take))
                budget -= take
        return [it for it in items if it.seq.status is SeqStatus.RUNNING]

    def update(self, batch: SchedulerOutput, sampled: Sampled, finish: FinishRule) -> list[Advanced]:
        """Advances the sequences the step ran: their computed tokens, the sampled ones, and those that ended."""
        drawn = iter(zip(sampled.tokens, sampled.logprobs))
        advanced: list[Advanced] = []
        for it in batch.items:
            seq, samples = it.seq, it.samples  # before the advance, which changes it
            seq.num_computed += it.num_new
            self._register(seq)
            seq.prompt_logprobs.extend(sampled.prompt_logprobs.get(seq.request_id, ()))
            if not samples:
                continue
            token, logprobs = next(drawn)
            seq.output_ids.append(token)
            reason = finish(seq, token)
            if reason is not None:
                self.finish(seq, reason)
            advanced.append(Advanced(seq, token, logprobs, reason))
        return advanced

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        seq.finish_reason = reason
        seq.status = SeqStatus.FINISHED
        if seq in self.running:
            self.running.remove(seq)
        self.free(seq)

    def abort(self, request_id: str) -> Sequence | None:
        for seq in list(self.running) + list(self.waiting):
            if seq.request_id == request_id:
                if seq in self.waiting:
                    self.waiting.remove(seq)
                    seq.status = SeqStatus.FINISHED
                    seq.finish_reason = FinishReason.ABORT
                    if seq.block_tables:
                        self.free(seq)
                else:
                    self.finish(seq, FinishReason.ABORT)
                return seq
        return None


class PrefillScheduler(Scheduler):
    """Prefill instance: FCFS batches of whole prompts up to Lm tokens; a longer prompt runs alone."""

    def schedule(self) -> SchedulerOutput:
        return SchedulerOutput(self._admit(self.config.max_batch_tokens, chunk=False))

    def update(self, batch: SchedulerOutput, sampled: Sampled, finish: FinishRule) -> list[Advanced]:
        """A prompt that sampled its first token and goes on leaves the batch: its K/V is held for a pull."""
        advanced = super().update(batch, sampled, finish)
        for adv in advanced:
            if adv.finish_reason is None:
                self.running.remove(adv.seq)
                adv.seq.status = SeqStatus.PREFILLED
        return advanced


class ColocatedScheduler(Scheduler):
    """vLLM-style continuous batching: a step of new prefills whenever one can start, else a decode step."""

    def schedule(self) -> SchedulerOutput:
        items = self._admit(self.config.max_batch_tokens, chunk=False)
        return SchedulerOutput(items or self._continue_running(self.config.max_model_len))


class DecodeScheduler(ColocatedScheduler):
    """Decode instance: continuous batching of sequences whose K/V was pulled in.

    Its waiting queue holds only sequences it preempted; they recompute here, first, like new prefills.
    """


class ChunkedScheduler(Scheduler):
    """Sarathi-style: each step fills a token budget with every decode, then prompt chunks."""

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_batch_tokens
        items = self._continue_running(budget)
        return SchedulerOutput(items + self._admit(budget - sum(it.num_new for it in items), chunk=True))


SCHEDULERS: dict[str, type[Scheduler]] = {
    "prefill": PrefillScheduler,
    "decode": DecodeScheduler,
    "colocated": ColocatedScheduler,
    "chunked": ChunkedScheduler,
}
