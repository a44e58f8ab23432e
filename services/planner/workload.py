"""Workloads: prompt/output length distributions and arrival processes, synthetic or fitted from records.

Synthetic distributions (statistics they reproduce are in docs/planner.md):
- chatbot (ShareGPT-like): prompt ~ 2048·Beta(0.94, 1.28), output ~ LogNormal(3.71, 1.45), prompt + output < 2048;
  fitted to the prompt/output lengths the DistServe authors recorded serving ShareGPT on OPT-13B.
- code (HumanEval-like): prompt ~ LogNormal(4.72, 0.45), output ~ LogNormal(3.76, 0.75); fitted to the 164
  HumanEval prompts and canonical solutions (../shared/data/HumanEval.jsonl.gz).
- summarization (LongBench-like): prompt ~ U[1900, 2048] capped at 2040 − output (the authors' preprocessing),
  output ~ LogNormal(4.16, 1.0) (an assumption: the answers are not in shared/data).

Any of them may carry a prefix-hit distribution (`prefix.py`): the prompt tokens found in the prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.planner.prefix import PrefixHits

MAX_TOTAL = 2048


@dataclass(frozen=True, slots=True)
class Workload:
    """Where request lengths come from: a synthetic family, fixed lengths, or recorded pairs; and their prefix
    hits (none by default)."""

    name: str
    input_len: int = 0
    output_len: int = 0
    recorded: tuple[tuple[int, int], ...] = ()
    hits: PrefixHits | None = None

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`n` (prompt, output) lengths."""
        if self.recorded:
            pairs = np.array(self.recorded)[rng.integers(0, len(self.recorded), n)]
            return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        if self.name == "fixed":
            return np.full(n, self.input_len, np.int64), np.full(n, self.output_len, np.int64)
        return _SYNTHETIC[self.name](n, rng)

    def cached(self, prompts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Prompt tokens of each request found in the prefix cache."""
        return np.zeros_like(prompts) if self.hits is None else self.hits.cached(prompts, rng)


def _rejecting(draw, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw pairs until `n` satisfy 4 ≤ prompt, 1 ≤ output, prompt + output < MAX_TOTAL."""
    prompts, outputs = np.empty(0, np.int64), np.empty(0, np.int64)
    while len(prompts) < n:
        p, o = draw(2 * n, rng)
        keep = (p >= 4) & (o >= 1) & (p + o < MAX_TOTAL)
        prompts, outputs = np.concatenate([prompts, p[keep]]), np.concatenate([outputs, o[keep]])
    return prompts[:n], outputs[:n]


def _chatbot(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    draw = lambda k, r: ((MAX_TOTAL * r.beta(0.94, 1.28, k)).astype(np.int64),
                         np.rint(r.lognormal(3.71, 1.45, k)).astype(np.int64))
    return _rejecting(draw, n, rng)


def _code(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    draw = lambda k, r: (np.rint(r.lognormal(4.72, 0.45, k)).astype(np.int64),
                         np.rint(r.lognormal(3.76, 0.75, k)).astype(np.int64))
    return _rejecting(draw, n, rng)


def _summarization(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    def draw(k: int, r: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        out = np.maximum(np.rint(r.lognormal(4.16, 1.0, k)), 1).astype(np.int64)
        return np.minimum(r.integers(1900, MAX_TOTAL + 1, k), 2040 - out), out

    return _rejecting(draw, n, rng)


_SYNTHETIC = {"chatbot": _chatbot, "code": _code, "summarization": _summarization}


def unit_arrivals(n: int, rng: np.random.Generator, cv: float = 1.0) -> np.ndarray:
    """Arrival times at rate 1 (divide by the rate): Poisson when cv = 1, else gamma inter-arrivals of that CV."""
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / shape, n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def length_stats(prompts: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """Mean, median and p90 of prompt and output lengths."""
    stats: dict[str, float] = {}
    for key, values in (("prompt", prompts), ("output", outputs)):
        stats[f"{key}_mean"] = float(np.mean(values))
        stats[f"{key}_p50"] = float(np.median(values))
        stats[f"{key}_p90"] = float(np.percentile(values, 90))
    return stats
