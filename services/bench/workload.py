"""Benchmark requests: the planner's length distributions scaled to the served model, with seeded arrivals, and
two workloads whose prompts share prefixes (the prefix cache's case).

A workload's lengths are drawn exactly as the planner draws them (`services.planner.workload`), then prompts are
multiplied by `prompt_scale` and outputs by `output_scale` and clipped to the model's context, so that one CPU
core prefills a prompt in a fraction of a second rather than seconds. Arrival times are drawn at rate 1 and
divided by the rate of each point, so every rate of a sweep (and the simulator) sees the same requests in the
same order.

- multi-turn: conversations of `turns` turns (uniform), each its own system prompt of SYSTEM_TOKENS, then per turn
  a user message (MESSAGE lengths) and an answer (the chatbot's output lengths, at most ANSWER_CAP); a follow-up
  turn is sent `think_s` (exponential) after the previous answer, its prompt the conversation so far as the
  server answered it (`loadgen`). The rate counts requests (turns), as for every workload, so goodput per device
  compares across workloads: conversations arrive at the rate over the mean turns per conversation. A
  conversation ends before a turn that would pass the context.
- shared-prompt: every request is one of `system_prompts` system prompts of SHARED_TOKENS (uniform) followed by a
  distinct user message (MESSAGE lengths), answered with the chatbot's output lengths.
Lengths here are at scale 1, scaled as the planner's are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.bench.loadgen import Conversation, Turn
from services.common.prefix_hash import block_hashes
from services.planner.workload import Workload, length_stats, unit_arrivals

PLANNER_WORKLOADS = ("chatbot", "code", "summarization")
WORKLOADS = (*PLANNER_WORKLOADS, "multi-turn", "shared-prompt")
SYSTEM_TOKENS = 256  # a conversation's own system prompt
SHARED_TOKENS = 1024  # a shared system prompt
MESSAGE = (4.4, 0.8)  # a user message's length: LogNormal(mu, sigma), median 81 tokens
ANSWER_CAP = 1024  # tokens of one answer at most
THINK_S = 2.0  # multi-turn: mean think time (seconds)
SYSTEM_PROMPTS = 4  # shared-prompt: how many


@dataclass(frozen=True, slots=True)
class Sample:
    """`n` requests: the prompt lengths they send (a follow-up turn: the conversation so far plus its message, its
    answers at their full output length) and output lengths, the rate-1 arrival times of their conversations, the
    token ids each adds to its conversation, each one's turn (0 opens a conversation) and think time (seconds)."""

    prompts: np.ndarray
    outputs: np.ndarray
    unit_arrivals: np.ndarray
    prompt_ids: tuple[tuple[int, ...], ...]
    turns: np.ndarray
    think_s: np.ndarray

    def __len__(self) -> int:
        return len(self.prompts)

    def arrivals(self, rate: float) -> np.ndarray:
        return self.unit_arrivals / rate

    def stats(self) -> dict[str, float]:
        return length_stats(self.prompts, self.outputs)

    def conversations(self, rate: float, prefix: str) -> list[Conversation]:
        """The conversations of a run at `rate`, their requests with ids `prefix-i` in the sample's order."""
        arrivals = self.arrivals(rate)
        starts = np.flatnonzero(self.turns == 0).tolist()
        return [Conversation(float(arrivals[a]), tuple(
            Turn(f"{prefix}-{i}", self.prompt_ids[i], int(self.outputs[i]), float(self.think_s[i])) for i in range(a, b)))
            for a, b in zip(starts, [*starts[1:], len(self)])]

    def cached_tokens(self, block_size: int) -> np.ndarray:
        """Each request's prompt tokens a prefix cache holding every earlier request's full blocks would supply
        (at least its last token computed): what a single prefill instance whose pool evicts none of them finds.
        Single-turn samples only (a turn's ids are its whole prompt)."""
        if self.turns.any():
            raise ValueError("cached_tokens: a multi-turn sample's ids are what each turn adds, not its prompt")
        seen: set[int] = set()
        cached = np.zeros(len(self), np.int64)
        for i, ids in enumerate(self.prompt_ids):
            hashes = block_hashes(list(ids), block_size)
            usable = (len(ids) - 1) // block_size
            cached[i] = next((k for k, h in enumerate(hashes[:usable]) if h not in seen), usable) * block_size
            seen.update(hashes)
        return cached

    def head(self, n: int) -> Sample:
        """The first `n` requests (the last conversation possibly cut short)."""
        return Sample(self.prompts[:n], self.outputs[:n], self.unit_arrivals[:n], self.prompt_ids[:n], self.turns[:n],
                      self.think_s[:n])


@dataclass(frozen=True, slots=True)
class BenchWorkload:
    name: str
    prompt_scale: float = 0.25  # multiplies the planner's prompt lengths
    output_scale: float = 0.5  # ... and its output lengths
    max_context: int = 4096  # prompt + output stay within it
    cv: float = 1.0  # inter-arrival CV (of conversations): 1 Poisson, else gamma
    seed: int = 0
    think_s: float = THINK_S  # multi-turn: mean think time
    turns: tuple[int, int] = (3, 6)  # multi-turn: turns per conversation, fewest and most
    system_prompts: int = SYSTEM_PROMPTS  # shared-prompt: how many

    def sample(self, n: int, vocab: int) -> Sample:
        """The first `n` requests of this workload's seeded sequence (token ids uniform over the vocabulary)."""
        if self.name == "multi-turn":
            return self._multi_turn(n, vocab)
        if self.name == "shared-prompt":
            return self._shared_prompt(n, vocab)
        rng = np.random.default_rng(self.seed)
        prompts, outputs = Workload(self.name).sample(n, rng)
        unit = unit_arrivals(n, rng, self.cv)
        prompts, outputs = scale_lengths(prompts, outputs, self.prompt_scale, self.output_scale, self.max_context)
        ids = np.random.default_rng(self.seed + 1).integers(3, vocab, int(prompts.sum()))
        cuts = np.cumsum(prompts)[:-1]
        zeros = np.zeros(n, np.int64)
        return Sample(prompts, outputs, unit, tuple(tuple(map(int, p)) for p in np.split(ids, cuts)), zeros, zeros * 0.0)

    def _scaled(self, tokens: float | np.ndarray, scale: float) -> np.ndarray:
        return np.maximum(np.rint(np.asarray(tokens) * scale), 1).astype(np.int64)

    def _answers(self, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._scaled(np.minimum(rng.lognormal(3.71, 1.45, k), ANSWER_CAP), self.output_scale)

    def _messages(self, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._scaled(rng.lognormal(*MESSAGE, k), self.prompt_scale)

    def _multi_turn(self, n: int, vocab: int) -> Sample:
        rng, ids = np.random.default_rng(self.seed), np.random.default_rng(self.seed + 1)
        system = int(self._scaled(SYSTEM_TOKENS, self.prompt_scale))
        prompts, outputs, added, turns, think, owner = [], [], [], [], [], []
        conversations = 0
        while len(prompts) < n:
            count = int(rng.integers(self.turns[0], self.turns[1] + 1))
            messages, answers = self._messages(count, rng), self._answers(count, rng)
            messages[0] += system
            context = 0  # tokens of the conversation so far
            for k, (message, answer) in enumerate(zip(messages.tolist(), answers.tolist())):
                if context + message + answer > self.max_context:
                    break
                prompts.append(context + message)
                outputs.append(answer)
                added.append(tuple(map(int, ids.integers(3, vocab, message))))
                turns.append(k)
                think.append(float(rng.exponential(self.think_s)) if k else 0.0)
                owner.append(conversations)
                context += message + answer
            conversations += 1
        # conversations at the rate over the mean turns per conversation: the turns come at the rate
        unit = unit_arrivals(conversations, rng, self.cv) * len(owner) / conversations
        return Sample(np.array(prompts[:n]), np.array(outputs[:n]), unit[owner[:n]], tuple(added[:n]),
                      np.array(turns[:n]), np.array(think[:n]))

    def _shared_prompt(self, n: int, vocab: int) -> Sample:
        rng, ids = np.random.default_rng(self.seed), np.random.default_rng(self.seed + 1)
        shared = int(self._scaled(SHARED_TOKENS, self.prompt_scale))
        systems = [tuple(map(int, ids.integers(3, vocab, shared))) for _ in range(self.system_prompts)]
        which, messages = rng.integers(0, self.system_prompts, n), self._messages(n, rng)
        outputs = np.minimum(self._answers(n, rng), self.max_context - shared - messages)
        added = tuple(systems[w] + tuple(map(int, ids.integers(3, vocab, m))) for w, m in zip(which, messages))
        zeros = np.zeros(n, np.int64)
        return Sample(shared + messages, outputs, unit_arrivals(n, rng, self.cv), added, zeros, zeros * 0.0)


def scale_lengths(prompts: np.ndarray, outputs: np.ndarray, prompt_scale: float, output_scale: float,
                  max_context: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled lengths (prompt ≥ 4, output ≥ 1), outputs cut so that prompt + output ≤ `max_context`."""
    p = np.minimum(np.maximum(np.rint(prompts * prompt_scale), 4), max_context - 1).astype(np.int64)
    o = np.maximum(np.rint(outputs * output_scale), 1).astype(np.int64)
    return p, np.minimum(o, max_context - p)
