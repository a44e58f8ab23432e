"""Simulated colocated instances: prefill and decode share one engine's step loop, as in the served `colocated`
(vLLM-style) and `chunked` (Sarathi-style) policies of `services/engine/scheduler.py`.

colocated: a step of whole new prompts (FCFS within the token budget; a longer prompt runs alone) whenever one
can start, else a decode step of every running request. chunked: each step gives every running request its next
token or prompt chunk within the token budget, in admission order, then fills what is left with chunks of new
prompts. A request's first token comes at the end of the step that computes its prompt's last token.

KV: a request is admitted once its prompt + output tokens fit in the instance's capacity (the engine grows its
blocks as it goes and preempts when short, which a benchmark's loads do not reach). The router books prompt +
output tokens on the instance it picks, so the least-loaded instance is that with the fewest booked tokens of
unfinished requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from services.common.step_model.attended import FULL
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.shape import ModelShape
from services.planner.instances import INF
from services.planner.serving import ServingOverheads
from services.planner.simulator import SimResult, at_client

Policy = Literal["colocated", "chunked"]
MAX_SEQS = 64  # running requests at most, the engine's default `max_num_seqs`


@dataclass(slots=True)
class _Seq:
    rid: int
    prompt_left: int  # prompt tokens not computed yet
    computed: int  # tokens whose K/V is cached
    to_sample: int  # output tokens still to come


@dataclass(slots=True)
class _Step:
    prompt_tokens: int = 0
    prompt_sq: float = 0  # t2 of the prompt tokens (`prompt_sq` of each chunk after its computed tokens)
    decodes: int = 0
    context: float = 0  # tokens the decodes attend to (`Attended.context`)

    def seconds(self, coeffs: TPCoefficients) -> float:
        if not self.decodes:
            return coeffs.prefill_time(self.prompt_tokens, self.prompt_sq)
        if not self.prompt_tokens:
            return coeffs.decode_time(self.context, self.decodes)
        return coeffs.mixed_time(self.prompt_tokens, self.prompt_sq, self.context, self.decodes)


class ColocatedInstance:
    """One engine serving both phases; driven like the disaggregated instances (`advance`, `load`, `enqueue`).
    With a `shape`, a request holds the K/V its layer groups keep and a sliding layer attends to its window only."""

    def __init__(self, coeffs: TPCoefficients, policy: Policy, capacity: int, max_batch_tokens: int,
                 prompt: list[int], output: list[int], first_at: list[float], finish_at: list[float],
                 shape: ModelShape | None = None) -> None:
        self.coeffs, self.chunked, self.capacity, self.budget = coeffs, policy == "chunked", capacity, max_batch_tokens
        self.kv_tokens: Callable[[int], int] = shape.kv_tokens if shape else int
        self.attended = shape.attended if shape else FULL
        self.prompt, self.output, self.first_at, self.finish_at = prompt, output, first_at, finish_at
        self.waiting: deque[int] = deque()
        self.arrival: dict[int, float] = {}
        self.running: list[_Seq] = []
        self.free_at = 0.0  # end of the step under way
        self.booked = 0  # prompt + output tokens of the unfinished requests routed here
        self.reserved = 0  # ... of the admitted ones

    def load(self, t: float) -> int:
        return self.booked

    def enqueue(self, rid: int, t: float) -> None:
        need = self.kv_tokens(self.prompt[rid] + self.output[rid])
        if need > self.capacity:
            raise ValueError(f"request of {need} tokens exceeds the instance's KV capacity of {self.capacity}")
        self.waiting.append(rid)
        self.arrival[rid] = t
        self.booked += need

    def advance(self, t: float) -> None:
        """Run every step that starts before t."""
        while self.running or self.waiting:
            start = self.free_at if self.running else max(self.free_at, self.arrival[self.waiting[0]])
            if start >= t:
                return
            step, ends = self._schedule()
            self.free_at = start + step.seconds(self.coeffs)
            for seq, take in ends:
                self._account(seq, take)

    def _schedule(self) -> tuple[_Step, list[tuple[_Seq, int]]]:
        """This step's batch: (shape, [(request, tokens it computes)])."""
        if self.chunked:
            batch = self._continue(self.budget)
            batch += self._admit(self.budget - sum(take for _, take in batch))
        else:
            batch = self._admit(self.budget) or self._continue(INF)
        step, attended = _Step(), self.attended
        for seq, take in batch:
            if seq.prompt_left:
                step.prompt_tokens += take
                step.prompt_sq += attended.prompt_sq(take, seq.computed)
            else:
                step.decodes += 1
                step.context += attended.context(seq.computed + 1)
        return step, batch

    def _admit(self, budget: float) -> list[tuple[_Seq, int]]:
        """New prompts, FCFS: chunks within the budget (chunked), else whole prompts (a longer one runs alone)."""
        batch: list[tuple[_Seq, int]] = []
        while self.waiting and budget > 0 and len(self.running) < MAX_SEQS:
            rid = self.waiting[0]
            take = min(self.prompt[rid], budget) if self.chunked else self.prompt[rid]
            need = self.kv_tokens(self.prompt[rid] + self.output[rid])
            if (batch and take > budget) or self.reserved + need > self.capacity:
                break
            self.waiting.popleft()
            del self.arrival[rid]
            self.reserved += need
            seq = _Seq(rid, self.prompt[rid], 0, self.output[rid])
            self.running.append(seq)
            batch.append((seq, take))
            budget -= take
        return batch

    def _continue(self, budget: float) -> list[tuple[_Seq, int]]:
        """Every running request's next token, or its prompt's next chunk, while the budget lasts."""
        batch: list[tuple[_Seq, int]] = []
        for seq in self.running:
            take = int(min(seq.prompt_left or 1, budget))
            if take > 0:
                batch.append((seq, take))
                budget -= take
        return batch

    def _account(self, seq: _Seq, take: int) -> None:
        """The step's outputs: a token when the request's tokens are all computed; frees it when it is done."""
        seq.computed += take
        if seq.prompt_left:
            seq.prompt_left -= take
            if seq.prompt_left:
                return
            self.first_at[seq.rid] = self.free_at
        seq.to_sample -= 1
        if seq.to_sample <= 0:
            self.finish_at[seq.rid] = self.free_at
            self.running.remove(seq)
            need = self.kv_tokens(self.prompt[seq.rid] + self.output[seq.rid])
            self.reserved -= need
            self.booked -= need


def simulate_colocated(coeffs: TPCoefficients, policy: Policy, instances: int, capacity: int, max_batch_tokens: int,
                       prompts: np.ndarray, outputs: np.ndarray, arrivals: np.ndarray,
                       serving: ServingOverheads | None = None, shape: ModelShape | None = None) -> SimResult:
    """Every request's TTFT and TPOT on `instances` colocated instances (arrivals ascending); `shape`: the model's,
    for the K/V a request holds and what its sliding layers attend to."""
    hop = serving or ServingOverheads()
    n = len(prompts)
    prompt, output = prompts.tolist(), outputs.tolist()
    first, finish = [0.0] * n, [0.0] * n
    pool = [ColocatedInstance(coeffs, policy, capacity, max_batch_tokens, prompt, output, first, finish, shape)
            for _ in range(instances)]
    for rid, t in enumerate((arrivals + hop.to_prefill).tolist()):
        for inst in pool:
            inst.advance(t)
        min(pool, key=lambda inst: inst.load(t)).enqueue(rid, t)
    for inst in pool:
        inst.advance(INF)
    return at_client(arrivals, first, finish, outputs, hop)
