"""The prefix-hit distribution of a workload: the share of each prompt that the prefill finds in its prefix cache,
by prompt length, fitted from request records (`cached_tokens` / `prompt_tokens`) and drawn per simulated request.

It is kept as the empirical quantiles of the cached fraction in each prompt-length bin, not a fitted family: the
hits of multi-turn chat are a point mass at 0 (first turns, new tenants) beside a bulk near 1 (later turns, whose
prompt is mostly history), which a Beta or a mean would smear, and they grow with the prompt's length, which the
bins keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUANTILES = 21  # quantiles of the cached fraction kept per bin: every 5 %
MIN_PER_BIN = 50  # records per prompt-length bin, at least
MAX_BINS = 8


@dataclass(frozen=True, slots=True)
class PrefixHits:
    """The cached fraction of a prompt by its length."""

    edges: tuple[int, ...]  # ascending prompt lengths: bin i holds (edges[i-1], edges[i]]; one bin more than edges
    quantiles: tuple[tuple[float, ...], ...]  # per bin: the fraction at probabilities spread evenly over [0, 1]

    def cached(self, prompts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Cached tokens of each prompt, a fraction drawn from its bin (at least the last token is computed)."""
        bins = np.searchsorted(self.edges, prompts, side="left")
        u = rng.random(len(prompts))
        fraction = np.zeros(len(prompts))
        for i, q in enumerate(self.quantiles):
            here = bins == i
            fraction[here] = np.interp(u[here], np.linspace(0.0, 1.0, len(q)), q)
        return np.minimum((fraction * prompts).astype(np.int64), prompts - 1)

    def as_dict(self) -> dict:
        return {"edges": list(self.edges), "quantiles": [list(q) for q in self.quantiles]}


def fit_hits(prompts: np.ndarray, cached: np.ndarray) -> PrefixHits | None:
    """The distribution of recorded hits: up to MAX_BINS prompt-length bins of equal counts (MIN_PER_BIN records
    each at least), QUANTILES quantiles of the cached fraction in each; None where nothing was cached."""
    if not cached.any():
        return None
    fraction = cached / prompts
    bins = min(MAX_BINS, max(1, len(prompts) // MIN_PER_BIN))
    edges = np.unique(np.quantile(prompts, np.arange(1, bins) / bins, method="inverted_cdf")).astype(np.int64)
    edges = edges[edges < prompts.max()]  # no empty last bin
    where = np.searchsorted(edges, prompts, side="left")
    probs = np.linspace(0.0, 1.0, QUANTILES)
    quantiles = tuple(tuple(float(round(f, 4)) for f in np.quantile(fraction[where == i], probs))
                      for i in range(len(edges) + 1))
    return PrefixHits(tuple(int(e) for e in edges), quantiles)


def hit_rate(prompts: np.ndarray, cached: np.ndarray) -> float:
    """The share of prompt tokens found in the prefix cache."""
    return float(cached.sum() / prompts.sum()) if prompts.sum() else 0.0
