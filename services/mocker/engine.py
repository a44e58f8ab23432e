"""One mock instance's engine: the real block manager (block accounting, the prefix cache and the events its index
is published from), FCFS prefill batches of up to Lm tokens and continuous decode batches, each step lasting what
the fitted latency model says (`services/common/step_model/`) instead of running a model. A token is a function
of the prompt's first token and its position, so a re-prefill of prompt + output streams on unchanged."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from services.common.errors import EngineInputError, LocalPrefillDeclined
from services.common.model_config import ModelConfig
from services.common.prefix_hash import block_hashes
from services.common.sampling import SamplingParams
from services.common.step_model import prompt_sq
from services.common.validation import validate_request
from services.engine.block_manager import BlockManager
from services.engine.block_queue import BlockQueue
from services.engine.step_log import EngineStats, StepLog, StepRecord
from services.mocker.config import MockSettings
from services.mocker.leases import LeaseTable


@dataclass(slots=True)
class Seq:
    prompt: list[int]
    namespace: str
    blocks: list[int]
    cached: int  # prompt tokens its prefix cache (or a pulled prefix) supplied
    max_tokens: int = 1
    output: list[int] = field(default_factory=list)
    to_compute: int = 0  # prompt tokens a step must still compute (a prefill; a decode's local prefill)
    step_start: float = 0.0
    step_end: float = 0.0
    done: asyncio.Future | None = None  # prefill: set when its step ends
    tokens: asyncio.Queue | None = None  # decode: each step's new token; None at the end

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)


class MockEngine:
    def __init__(self, instance_id: str, model: ModelConfig, settings: MockSettings, leases: LeaseTable) -> None:
        self.instance_id = instance_id
        self.model = model
        self.settings = settings
        self.leases = leases
        self.blocks = BlockManager(settings.num_blocks, settings.block_size)
        self.prefill_line, self.decode_line = settings.prefill_line(), settings.decode_line()
        self.log = StepLog()
        self.steps = self.computed = self.queried = self.hit = 0
        self._prefills: deque[Seq] = deque()
        self._decoding: list[Seq] = []
        self._waiting: deque[Seq] = deque()  # decodes past max_num_seqs
        self._work = asyncio.Event()
        self._reservations = BlockQueue(self.blocks.try_allocate, self.blocks.free)

    def validate(self, prompt: list[int], params: SamplingParams) -> None:
        validate_request(self.model, prompt, params)
        needed = self.blocks.blocks_for(len(prompt) + params.max_tokens)
        if needed > self.blocks.num_blocks:
            raise EngineInputError("max_tokens", f"prompt + max_tokens needs {needed} KV blocks, "
                                                 f"the pool has {self.blocks.num_blocks}")

    def token(self, prompt: list[int], position: int) -> int:
        return (prompt[0] * 31 + position) % self.model.vocab_size

    # ---- blocks ------------------------------------------------------------------------------------

    def cached_prefix(self, prompt: list[int], namespace: str, shareable: int) -> list[int]:
        """Holds the cached blocks of the prompt's longest cached prefix within its first `shareable` tokens."""
        held = self.blocks.match(block_hashes(prompt, self.blocks.block_size, namespace,
                                              shareable // self.blocks.block_size))
        self.queried += len(prompt)
        self.hit += len(held) * self.blocks.block_size
        return held

    async def reserve(self, num_blocks: int) -> list[int]:
        """Waits (FCFS, `BlockQueue`) until the pool can give `num_blocks` blocks."""
        return await self._reservations.reserve(num_blocks)

    def free(self, blocks: list[int]) -> None:
        self.blocks.free(blocks)
        self._reservations.grant()

    def register(self, seq: Seq) -> None:
        """Caches the sequence's full blocks under their hashes (its K/V is computed or pulled)."""
        tokens = seq.prompt + seq.output
        for b, h in zip(seq.blocks, block_hashes(tokens, self.blocks.block_size, seq.namespace)):
            self.blocks.register(b, h)

    # ---- prefill -----------------------------------------------------------------------------------

    async def prefill(self, prompt: list[int], namespace: str, lent: list[int] | None = None) -> Seq:
        """Computes a prompt in the next batches; `lent`: the prompt's first blocks pulled from elsewhere (cached
        here, not computed). Returns it with its blocks held."""
        cached = self.cached_prefix(prompt, namespace, len(prompt) - 1)
        try:
            rest = await self.reserve(self.blocks.blocks_for(len(prompt)) - len(cached))
        except BaseException:
            self.free(cached)
            raise
        supplied = max(len(cached), len(lent or ())) * self.blocks.block_size
        seq = Seq(prompt, namespace, cached + rest, supplied, to_compute=len(prompt) - supplied,
                  done=asyncio.get_running_loop().create_future())
        self._prefills.append(seq)
        self._work.set()
        try:
            await seq.done
        except BaseException:
            if seq in self._prefills:
                self._prefills.remove(seq)
            self.free(seq.blocks)
            raise
        self.register(seq)
        return seq

    async def run_prefills(self) -> None:
        """The prefill step loop: FCFS batches up to Lm tokens (a longer prompt alone)."""
        while True:
            while not self._prefills:
                self._work.clear()
                await self._work.wait()
            batch, tokens = [], 0
            while self._prefills and (not batch or tokens + self._prefills[0].to_compute <= self.settings.batch_tokens):
                seq = self._prefills.popleft()
                batch.append(seq)
                tokens += seq.to_compute
            sum_sq = sum(prompt_sq(s.to_compute, s.cached) for s in batch)
            start = time.time()
            await asyncio.sleep(self.prefill_line.seconds(tokens, sum_sq) * self.settings.time_scale)
            end = time.time()
            self._stepped(StepRecord("prefill", len(batch), tokens, sum_sq, sum(len(s.prompt) for s in batch),
                                     start, end - start), tokens)
            for seq in batch:
                seq.step_start, seq.step_end = start, end
                if not seq.done.done():
                    seq.done.set_result(None)

    # ---- decode ------------------------------------------------------------------------------------

    async def decode(self, prompt: list[int], first_token: int | None, namespace: str, max_tokens: int,
                     pull: tuple[str, int] | None, local_cap: int = 0) -> AsyncIterator[tuple[int, Seq]]:
        """Streams (token, seq) after pulling `pull` (lease id, blocks there) less what is cached here; without
        one, prefills the prompt here first (at most `local_cap` uncached tokens; 0: any)."""
        cached = self.cached_prefix(prompt, namespace, len(prompt) - (first_token is None))
        uncached = len(prompt) - len(cached) * self.blocks.block_size
        if pull is None and local_cap and uncached > local_cap:
            self.free(cached)
            raise LocalPrefillDeclined(f"local prefill declined: {uncached} prompt tokens uncached here, "
                                       f"more than the cap of {local_cap}")
        try:
            rest = await self.reserve(self.blocks.blocks_for(len(prompt) + max_tokens) - len(cached))
        except BaseException:
            self.free(cached)
            raise
        seq = Seq(prompt, namespace, cached + rest, len(cached) * self.blocks.block_size, max_tokens,
                  tokens=asyncio.Queue())
        try:
            if pull is not None:
                lease_id, source_blocks = pull
                moved = max(0, source_blocks - len(cached)) * self.blocks.block_size * self.settings.kv_bytes_per_token
                await self.leases.pull(lease_id, moved)
            if first_token is not None:
                seq.output.append(first_token)
            else:  # the last prompt token computed here (all of the uncached prompt without a pull)
                seq.to_compute = uncached if pull is None else 1
            self.register(seq)
            self._waiting.append(seq)
            self._work.set()
            while (token := await seq.tokens.get()) is not None:
                yield token, seq
        finally:
            if seq in self._waiting:
                self._waiting.remove(seq)
            if seq in self._decoding:
                self._decoding.remove(seq)
            self.register(seq)
            self.free(seq.blocks)

    async def run_decodes(self) -> None:
        """The decode step loop: every running request one token per step (a local prefill computes its
        prompt in the step it joins)."""
        while True:
            while not self._decoding and not self._waiting:
                self._work.clear()
                await self._work.wait()
            while self._waiting and len(self._decoding) < self.settings.max_num_seqs:
                self._decoding.append(self._waiting.popleft())
            batch = list(self._decoding)
            fresh = [s for s in batch if s.to_compute]
            new, fresh_sq = sum(s.to_compute for s in fresh), sum(prompt_sq(s.to_compute, s.cached) for s in fresh)
            context = sum(s.length for s in batch)
            seconds = self.decode_line.seconds(context, len(batch))
            if fresh:
                seconds += self.prefill_line.seconds(new, fresh_sq)
            start = time.time()
            await asyncio.sleep(seconds * self.settings.time_scale)
            end = time.time()
            decodes = len(batch) - len(fresh)
            self._stepped(StepRecord("mixed" if fresh else "decode", len(batch), new + decodes, fresh_sq + decodes,
                                     context, start, end - start), new + decodes)
            for seq in [s for s in batch if s in self._decoding]:  # not those cancelled during the step
                seq.to_compute = 0
                seq.step_start, seq.step_end = seq.step_start or start, end
                seq.output.append(self.token(seq.prompt, seq.length))
                seq.tokens.put_nowait(seq.output[-1])
                if len(seq.output) >= seq.max_tokens:
                    self._decoding.remove(seq)
                    seq.tokens.put_nowait(None)

    # ---- stats -------------------------------------------------------------------------------------

    def _stepped(self, record: StepRecord, computed: int) -> None:
        self.steps += 1
        self.computed += computed
        self.log.add(record)

    def stats(self, steps_since: float | None = None) -> EngineStats:
        held = self.leases.held(self.instance_id)
        return EngineStats(self.blocks.num_blocks, self.blocks.num_used, 0, 0, len(self._prefills) + len(self._waiting),
                           len(self._decoding), held, self.steps, self.log.since(steps_since) if steps_since else [],
                           self.blocks.num_cached, self.computed, self.queried, self.hit)
