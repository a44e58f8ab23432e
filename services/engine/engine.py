"""The engine: admission checks, the step loop `schedule → execute → update`, and finish rules.

Single-threaded by design; services drive it from one thread (services/engine/engine_thread.py).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import llguidance
import torch

from services.common.engine_settings import EngineSettings
from services.common.errors import EngineInputError
from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.model_config import ModelConfig
from services.common.prefix_hash import block_hashes
from services.common.sampling import MAX_N, FinishReason, SamplingParams, TokenLogprobs, choice_seed
from services.common.step_journal import StepJournal
from services.common.step_model.attended import Attended
from services.common.validation import validate_request
from services.engine.block_manager import BlockManager
from services.engine.finish import FinishRule
from services.engine.grammar import GrammarViolation, compile_grammar, tokenizer_for
from services.engine.kv_tables import CachedPrefix, KVTables, Tables, present
from services.engine.model_runner import ModelRunner
from services.engine.parallel.shard import check_layout
from services.engine.sampler import Sampled
from services.engine.scheduler import SCHEDULERS, Advanced, Policy, SchedulerConfig, SchedulerOutput
from services.engine.sequence import SeqStatus, Sequence
from services.engine.step_guard import StepGuard
from services.engine.step_log import EngineStats, StepLog, StepRecord

if TYPE_CHECKING:
    from services.engine.parallel.runner import ParallelRunner


@dataclass(frozen=True, slots=True)
class EngineConfig(EngineSettings):
    model: str
    policy: Policy = "colocated"
    device: str = "cpu"
    pool_path: str | None = None  # a /dev/shm file makes the pool mappable by kvxfer
    tp: int = 1  # tensor-parallel ranks per stage
    pp: int = 1  # pipeline stages
    ep: int = 0  # MoE: expert groups per stage, dividing tp (0: one per TP rank, each holding whole experts)
    devices: tuple[str, ...] = ()  # one per rank (TP x PP > 1); default: consecutive from `device`
    rendezvous: str = ""  # host:port where rank 0 waits for ranks started elsewhere; empty: it starts them


@dataclass(slots=True)
class StepOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: FinishReason | None = None
    prefilled: bool = False  # prefill policy: K/V complete and held for a pull
    num_prompt_tokens: int = 0
    held_blocks: list[int] = field(default_factory=list)  # with `prefilled`: the blocks holding the K/V
    block_hashes: list[int] = field(default_factory=list)  # with `prefilled`: the content hashes of its full blocks
    step_start: float = 0.0  # unix seconds: the step that produced this output
    step_end: float = 0.0
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # of new_token_ids, when the request asked
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # with the first token, when asked: of prompt tokens 1..
    num_cached_tokens: int = 0  # with the first token: prompt tokens whose K/V came from the prefix cache
    error: str = ""  # the step failed for this request alone: it ends here (finish_reason ABORT)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class Prefilled:
    """A prefilled request's blocks, held until a decode instance pulled them."""

    seq: Sequence
    block_ids: list[int] = field(default_factory=list)


def fork_id(request_id: str, index: int) -> str:
    """The engine's id of choice `index` > 0 of an n > 1 request (choice 0 keeps the request's id)."""
    return f"{request_id}/{index}"


class LLMEngine:
    def __init__(self, config: EngineConfig, device: torch.device | None = None) -> None:
        self.config = config
        self.model_config = ModelConfig.from_folder(config.model)
        mc = self.model_config
        dtype = mc.dtype if config.dtype == "auto" else config.dtype
        self.groups = KVGroups.of_model(mc, config.block_size)
        self.attended = Attended.of(mc.num_layers, mc.sliding_layers, mc.sliding_window or 0)  # the step log's units
        self.layout = KVLayout(config.num_blocks, self.groups.slots(0, mc.num_layers), config.block_size,
                               mc.num_kv_heads, mc.head_dim, dtype)
        check_layout(mc, config.tp, config.pp, ep=config.ep)
        self.runner: ModelRunner | ParallelRunner
        if config.tp * config.pp > 1:
            from services.engine.parallel.runner import ParallelRunner

            self.runner = ParallelRunner(config.model, mc, config.num_blocks, config.block_size, dtype,
                                         config.device, config.tp, config.pp, config.devices, config.pool_path,
                                         config.rendezvous, config.ep)
        else:
            self.runner = ModelRunner(Path(config.model), mc, self.layout, self.groups,
                                      device or torch.device(config.device), config.pool_path)
        self.blocks = BlockManager(config.num_blocks, config.block_size, caching=config.prefix_caching == "on")
        self.kv = KVTables(self.blocks, self.groups)
        self.scheduler = SCHEDULERS[config.policy](
            self.kv, SchedulerConfig(config.max_batch_tokens, config.max_num_seqs, mc.max_position))
        self.prefilled: dict[str, Prefilled] = {}
        self._ids: set[str] = set()
        self.last_step: StepRecord | None = None  # the shape of the latest step (seconds: its forward pass)
        self.step_log = StepLog()  # served steps, with their periods (EngineThread writes it)
        self.guard = StepGuard()
        self.finish_rule = FinishRule(frozenset(mc.eos_token_ids), mc.max_position)
        self.journal: StepJournal | None = None  # set by an instance whose supervisor reads it after a crash
        # built here, not at the first structured request: a large vocabulary takes a second, which would stall a step
        self.grammar_tokenizer: llguidance.LLTokenizer | None = None
        self.no_grammar = ""  # why the model's output cannot be constrained, when it cannot
        try:
            self.grammar_tokenizer = tokenizer_for(config.model, mc.vocab_size, tuple(mc.eos_token_ids))
        except ValueError as exc:  # e.g. a tokenizer of more tokens than the model has: it serves, unconstrained
            self.no_grammar = f"this model's tokenizer cannot constrain its output ({exc})"
        self.computed_tokens = 0  # tokens whose K/V the steps computed, since the start

    # ---- admission -------------------------------------------------------------------------------

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raises EngineInputError naming the field when the request cannot be served."""
        validate_request(self.model_config, prompt_ids, params)
        if params.grammar:  # it compiles against this model's tokenizer and reads the resumed output
            self._constrained(Sequence("", prompt_ids, params))
        if params.prompt_logprobs is not None and self.config.tp * self.config.pp > 1:
            raise EngineInputError("logprobs", "prompt logprobs (echo with logprobs) need a single-rank instance")
        chunk = self.config.max_batch_tokens if self.config.policy == "chunked" else len(prompt_ids)
        needed = self.groups.peak_blocks(len(prompt_ids), len(prompt_ids) + params.max_tokens, chunk)
        if needed > self.blocks.num_blocks:
            raise EngineInputError(
                "max_tokens", f"prompt + max_tokens needs {needed} KV blocks, the pool has {self.blocks.num_blocks}")

    def _new_sequence(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                      cache_namespace: str) -> Sequence:
        if request_id in self._ids:
            raise EngineInputError("request_id", f"{request_id!r} is already in the engine")
        self.validate(prompt_ids, params)
        if params.seed is None:
            params.seed = random.getrandbits(63)
        seq = self._constrained(Sequence(request_id, list(prompt_ids), params, cache_namespace=cache_namespace))
        self._ids.add(request_id)
        return seq

    def _constrained(self, seq: Sequence) -> Sequence:
        """The sequence with a fresh matcher of its grammar (structured output) that has read the output streamed
        before a re-prefill (the prompt's last `resumed_tokens`); raises EngineInputError when the grammar does
        not compile against this model's tokenizer or refuses those tokens."""
        p = seq.params
        if p.grammar:
            if self.grammar_tokenizer is None:
                raise EngineInputError("grammar", self.no_grammar)
            seq.grammar = compile_grammar(self.grammar_tokenizer, p.grammar)
            resumed = seq.prompt_ids[len(seq.prompt_ids) - p.resumed_tokens :] if p.resumed_tokens else []
            if not seq.grammar.matcher.consume_tokens(resumed):
                raise EngineInputError("resumed_tokens", "the grammar refuses the output streamed before")
        return seq

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams, n: int = 1,
                    cache_namespace: str = "") -> list[str]:
        """Queues a request; returns its choices' ids. n > 1 (colocated, chunked): the n choices share one prefill.
        Choice i > 0 (`fork_id`, seeded `choice_seed(seed, i)`) forks from choice 0 once the prompt is computed.
        Its prompt reuses cached blocks of `cache_namespace` only."""
        if n != 1 and (self.config.policy not in ("colocated", "chunked") or not 1 <= n <= MAX_N):
            raise EngineInputError("n", f"must be 1 on a {self.config.policy} instance, else in [1, {MAX_N}]")
        taken = [fork_id(request_id, i) for i in range(1, n) if fork_id(request_id, i) in self._ids]
        if taken:
            raise EngineInputError("request_id", f"{taken[0]!r} is already in the engine")
        seq = self._new_sequence(request_id, prompt_ids, params, cache_namespace)
        for i in range(1, n):
            seq.forks.append(self._constrained(Sequence(fork_id(request_id, i), list(prompt_ids),
                                                        replace(seq.params, seed=choice_seed(seq.params.seed or 0, i)),
                                                        cache_namespace=cache_namespace)))
            self._ids.add(seq.forks[-1].request_id)
        self.scheduler.add(seq)
        return [f.request_id for f in seq.all_forks()]

    def reserve_blocks(self, num_tokens: int) -> list[int] | None:
        """Decode: blocks for a pulled prompt's K/V (what a sequence of `num_tokens` keeps, its layer groups' in
        turn), or None when the pool cannot hold it now (any thread)."""
        return self.blocks.try_allocate(self.groups.num_kept(num_tokens))

    def hold_cached(self, prompt_ids: list[int], cache_namespace: str, num_tokens: int,
                    keep_tokens: int | None = None) -> CachedPrefix:
        """Holds the cached blocks of the longest cached prefix of the prompt's full blocks within its first
        `num_tokens` tokens, as a sequence of `keep_tokens` tokens keeps them (None: of the prefix itself; any
        thread); the caller frees them like reserved blocks."""
        if not self.blocks.caching:
            return CachedPrefix(self.kv.empty(), 0)
        bs = self.blocks.block_size
        return self.kv.match(block_hashes(prompt_ids, bs, cache_namespace, num_tokens // bs), keep_tokens)

    def vouched(self, prompt_ids: list[int], cache_namespace: str, carried: list[int]) -> bool:
        """Whether the hashes a KV handle carries are this prompt's own, in its namespace, for as many of its first
        full blocks: only then may the handle's blocks join the prefix cache (any thread)."""
        return carried == block_hashes(prompt_ids, self.blocks.block_size, cache_namespace, len(carried))

    def cache_prefix(self, tables: Tables, hashes: list[int]) -> None:
        """Registers held blocks pulled from another instance under the hashes its handle carries, once `vouched`
        (any thread)."""
        self.kv.register(tables, hashes, 0)

    def free_blocks(self, block_ids: list[int]) -> None:
        """Returns reserved blocks (any thread)."""
        self.blocks.free(block_ids)

    def add_prefilled(self, request_id: str, prompt_ids: list[int], first_token: int | None, params: SamplingParams,
                      block_ids: list[int], cache_namespace: str = "", carried: list[int] | None = None) -> None:
        """Decode: admit a request whose prompt K/V already sits in `block_ids` (reserved, then pulled).

        Without `first_token` the last prompt token is computed again, as a decode step, to sample the first
        token here with this request's seed (n samples sharing one prefill). The engine owns the blocks from
        here on: refused, they go back to the pool. Its blocks join the prefix cache of `cache_namespace` only
        when `carried`, the hashes of its full prompt blocks that the K/V's handle carries, are the prompt's own."""
        try:
            seq = self._new_sequence(request_id, prompt_ids, params, cache_namespace)
        except EngineInputError:
            self.blocks.free(block_ids)
            raise
        if self.blocks.caching:
            seq.cacheable = carried == seq.hashes(self.blocks.block_size, len(prompt_ids) // self.blocks.block_size)
        seq.output_ids = [] if first_token is None else [first_token]
        try:
            if seq.grammar is not None:
                seq.grammar.sync(seq.output_ids)
        except GrammarViolation as exc:
            self.blocks.free(block_ids)
            self._ids.discard(request_id)
            raise EngineInputError("first_token", f"refused by the request's grammar: {exc}") from None
        seq.block_tables = self.groups.tables(list(block_ids), len(prompt_ids))
        seq.num_computed = len(prompt_ids) - (first_token is None)
        self.scheduler.add_running(seq)

    def release_prefilled(self, request_id: str) -> None:
        """Prefill: the K/V was pulled (or its lease expired); its blocks go back to the pool."""
        held = self.prefilled.pop(request_id)
        self.blocks.free(held.block_ids)
        self._ids.discard(request_id)

    def abort(self, request_id: str) -> bool:
        """Drops a request wherever it is and frees its blocks; False if the engine does not hold it."""
        if request_id in self.prefilled:
            self.release_prefilled(request_id)
            return True
        seq = self.scheduler.abort(request_id) or self._drop_fork(request_id)
        self._ids.difference_update(f.request_id for f in (seq.all_forks() if seq else ()))
        self._ids.discard(request_id)
        return seq is not None

    def _drop_fork(self, request_id: str) -> Sequence | None:
        """Takes a choice that waits to fork out of its parent's list."""
        for parent in [*self.scheduler.waiting, *self.scheduler.running]:
            for child in parent.forks:
                if child.request_id == request_id:
                    parent.forks.remove(child)
                    return child
        return None

    # ---- the step ----------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[StepOutput]:
        batch = self.scheduler.schedule()
        if not batch.items:
            self.last_step = None
            return []
        step_start = time.time()
        ran = self.guard.run(self._execute, batch, self.lost_rank)
        step_end = time.time()
        self.last_step = StepRecord.of(ran.batch, step_start, step_end - step_start, self.attended) if ran.batch.items else None
        self.computed_tokens += ran.batch.num_tokens
        outputs = [self._fail(item.seq, exc) for item, exc in ran.failed]
        for it in ran.batch.items:
            if it.samples and it.seq.forks:  # before update: a choice that ends at its first token frees its blocks
                self._fork(it.seq)
        for adv in self.scheduler.update(ran.batch, ran.sampled, self.finish_rule):
            outputs.append(self._output(adv, step_start, step_end))
        return outputs

    def _execute(self, batch: SchedulerOutput) -> Sampled:
        """Runs a batch (or, when the guard isolates a failure, one sequence of it), journaled first: a pass
        that crashes the process is blamed on the requests in it."""
        if self.journal is not None:
            self.journal.begin([it.seq.request_id for it in batch.items])
        try:
            return self.runner.execute(batch)
        finally:
            if self.journal is not None:
                self.journal.clear()

    def _output(self, adv: Advanced, step_start: float, step_end: float) -> StepOutput:
        seq = adv.seq
        out = StepOutput(seq.request_id, [adv.token], adv.finish_reason, num_prompt_tokens=len(seq.prompt_ids),
                         step_start=step_start, step_end=step_end, logprobs=[adv.logprobs] if adv.logprobs else [],
                         prompt_logprobs=seq.prompt_logprobs if len(seq.output_ids) == 1 else [],
                         num_cached_tokens=seq.num_cached if len(seq.output_ids) == 1 else 0)
        if adv.finish_reason is not None:
            self._ids.discard(seq.request_id)
        elif seq.status is SeqStatus.PREFILLED:
            out.held_blocks, out.prefilled = self._hold(seq), True
            out.block_hashes = seq.hashes(self.blocks.block_size, len(seq.prompt_ids) // self.blocks.block_size)
        return out

    def _fork(self, parent: Sequence) -> None:
        """The parent's prompt K/V is computed: its choices share the blocks before the last prompt position and
        each gets a copy of the block holding it; each recomputes that position in a decode step, which samples
        its first token with its own seed (as a decode instance does for choices sharing a disaggregated prefill)."""
        last = len(parent.prompt_ids) - 1
        whole, partial = divmod(last, self.blocks.block_size)
        # The one-process runner's pool is the one the block ids name, so it copies a choice's block; a TP/PP
        # runner's ranks each hold their own pool: there a choice recomputes its block instead.
        copier = self.runner if isinstance(self.runner, ModelRunner) else None
        copies = copier is not None
        for child in parent.forks:
            child.prompt_logprobs = parent.prompt_logprobs  # one list: this step's entries join it in the update
            copy = self.blocks.try_allocate(self.groups.count) if partial and copies else []
            if copy is None:  # no block for the copy now: this choice computes its prompt itself
                self.scheduler.add(child)
                continue
            child.block_tables = [table[:whole] for table in parent.block_tables]
            self.blocks.share(present(child.block_tables))
            if copier is not None and copy:
                for table, own, block in zip(child.block_tables, parent.block_tables, copy):
                    copier.copy_block(own[whole], block)  # a sliding group's too: it holds the last position
                    table.append(block)
            child.num_computed = last if copies else whole * self.blocks.block_size
            self.scheduler.add_running(child)
        parent.forks = []

    def _fail(self, seq: Sequence, exc: BaseException) -> StepOutput:
        """Ends a request whose step failed alone; its blocks go back and the engine serves on."""
        self.scheduler.abort(seq.request_id)
        self._ids.difference_update(f.request_id for f in seq.all_forks())
        return StepOutput(seq.request_id, [], FinishReason.ABORT, num_prompt_tokens=len(seq.prompt_ids),
                          error=f"the engine's step failed for this request ({type(exc).__name__})")

    def _hold(self, seq: Sequence) -> list[int]:
        """Prefill: the blocks of a prompt the scheduler set aside are held here until pulled."""
        self.prefilled[seq.request_id] = Prefilled(seq, self.groups.flat(seq.block_tables, seq.num_computed))
        seq.block_tables = []
        return list(self.prefilled[seq.request_id].block_ids)

    def stats(self, steps: int, steps_since: float | None = None) -> EngineStats:
        """A snapshot (engine thread); `steps_since` (unix seconds) adds the step records from then on."""
        seqs = [*self.scheduler.waiting, *self.scheduler.running]
        held = sum(len(p.block_ids) for p in self.prefilled.values())
        used = self.blocks.num_used
        return EngineStats(
            blocks_total=self.blocks.num_blocks, blocks_used=used,
            blocks_reserved=used - held - len({b for s in seqs for b in present(s.block_tables)}), blocks_held=held,
            waiting=len(self.scheduler.waiting), running=len(self.scheduler.running), held=len(self.prefilled),
            steps=steps, step_log=self.step_log.since(steps_since) if steps_since else [],
            blocks_cached=self.blocks.num_cached, computed_tokens=self.computed_tokens,
            cache_queried=self.scheduler.cache.queried, cache_hit=self.scheduler.cache.hit)

    # ---- offline use --------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Runs the requests to completion in this process and returns each one's generated ids."""
        plist = params if isinstance(params, list) else [replace(params) for _ in prompts]
        ids = [f"offline-{i}" for i in range(len(prompts))]
        for rid, prompt, p in zip(ids, prompts, plist):
            self.add_request(rid, prompt, p)
        results: dict[str, list[int]] = {rid: [] for rid in ids}
        while self.has_work():
            for out in self.step():
                if out.request_id in results:  # requests added by add_request run along, unreported
                    results[out.request_id].extend(out.new_token_ids)
        return [results[rid] for rid in ids]

    def lost_rank(self) -> str | None:
        """Why a TP/PP instance cannot step any more (a rank's process exited); None while it can."""
        return self.runner.lost_rank()

    def close(self) -> None:
        self.runner.close()
