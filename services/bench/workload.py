"""Benchmark requests: the planner's length distributions scaled to the served model, with seeded arrivals.

A workload's lengths are drawn exactly as the planner draws them (`services.planner.workload`), then prompts are
multiplied by `prompt_scale` and outputs by `output_scale` and clipped to the model's context, so that one CPU
core prefills a prompt in a fraction of a second rather than seconds. Arrival times are drawn at rate 1 and
divided by the rate of each point, so every rate of a sweep (and the simulator) sees the same requests in the
same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.bench.loadgen import BenchRequest
from services.planner.workload import Workload, length_stats, unit_arrivals

WORKLOADS = ("chatbot", "code", "summarization")


@dataclass(frozen=True, slots=True)
class Sample:
    """`n` requests: prompt and output lengths, rate-1 arrival times and the prompts' token ids."""

    prompts: np.ndarray
    outputs: np.ndarray
    unit_arrivals: np.ndarray
    prompt_ids: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.prompts)

    def arrivals(self, rate: float) -> np.ndarray:
        return self.unit_arrivals / rate

    def stats(self) -> dict[str, float]:
        return length_stats(self.prompts, self.outputs)

    def requests(self, rate: float, prefix: str) -> list[BenchRequest]:
        """The requests of a run at `rate`, with ids `prefix-i`."""
        arrivals = self.arrivals(rate)
        return [BenchRequest(f"{prefix}-{i}", self.prompt_ids[i], int(self.outputs[i]), float(arrivals[i]))
                for i in range(len(self))]

    def head(self, n: int) -> Sample:
        """The first `n` requests."""
        return Sample(self.prompts[:n], self.outputs[:n], self.unit_arrivals[:n], self.prompt_ids[:n])


@dataclass(frozen=True, slots=True)
class BenchWorkload:
    name: str
    prompt_scale: float = 0.25  # multiplies the planner's prompt lengths
    output_scale: float = 0.5  # ... and its output lengths
    max_context: int = 4096  # prompt + output stay within it
    cv: float = 1.0  # inter-arrival CV: 1 Poisson, else gamma
    seed: int = 0

    def sample(self, n: int, vocab: int) -> Sample:
        """The first `n` requests of this workload's seeded sequence (prompt ids uniform over the vocabulary)."""
        rng = np.random.default_rng(self.seed)
        prompts, outputs = Workload(self.name).sample(n, rng)
        unit = unit_arrivals(n, rng, self.cv)
        prompts, outputs = scale_lengths(prompts, outputs, self.prompt_scale, self.output_scale, self.max_context)
        ids = np.random.default_rng(self.seed + 1).integers(3, vocab, int(prompts.sum()))
        cuts = np.cumsum(prompts)[:-1]
        return Sample(prompts, outputs, unit, tuple(tuple(map(int, p)) for p in np.split(ids, cuts)))


def scale_lengths(prompts: np.ndarray, outputs: np.ndarray, prompt_scale: float, output_scale: float,
                  max_context: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled lengths (prompt ≥ 4, output ≥ 1), outputs cut so that prompt + output ≤ `max_context`."""
    p = np.minimum(np.maximum(np.rint(prompts * prompt_scale), 4), max_context - 1).astype(np.int64)
    o = np.maximum(np.rint(outputs * output_scale), 1).astype(np.int64)
    return p, np.minimum(o, max_context - p)
