"""The recorded workload: lengths, rate and burstiness fitted to the request records the router appends to
Redis (read by `services.common.registry.read_records`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.planner.prefix import fit_hits, hit_rate
from services.planner.workload import Workload, length_stats


@dataclass(frozen=True, slots=True)
class RecordedWorkload:
    workload: Workload  # the recorded (prompt, output) pairs and prefix hits
    count: int
    rate: float  # req/s over the records' arrival span
    arrival_cv: float  # CV of inter-arrival gaps
    stats: dict[str, float]
    hit_rate: float = 0.0  # share of prompt tokens found in the prefix cache

    def as_dict(self) -> dict:
        hits = self.workload.hits
        return {"count": self.count, "rate": self.rate, "arrival_cv": self.arrival_cv, **self.stats,
                "hit_rate": self.hit_rate, "prefix_hits": None if hits is None else hits.as_dict()}


def fit_records(records: list[dict[str, str]]) -> RecordedWorkload:
    """Lengths, prefix hits, rate and burstiness of recorded requests (records missing a field are skipped; one
    without `cached_tokens`, from a router before prefix caching, hit nothing)."""
    rows = []
    for r in records:
        try:
            rows.append((int(r["prompt_tokens"]), int(r["output_tokens"]), float(r["arrival"]),
                         int(r.get("cached_tokens", 0))))
        except (KeyError, ValueError):
            continue
    if len(rows) < 2:
        raise ValueError("workload: fewer than two usable request records in Redis")
    rows.sort(key=lambda row: row[2])
    prompts, outputs, arrivals, cached = (np.array(col) for col in zip(*rows))
    gaps = np.diff(arrivals)
    span = float(arrivals[-1] - arrivals[0])
    rate = (len(rows) - 1) / span if span > 0 else float("inf")
    cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 1.0
    pairs = tuple((int(p), max(int(o), 1)) for p, o in zip(prompts, outputs) if p >= 1)
    used = prompts >= 1
    hits = fit_hits(prompts[used], np.minimum(cached[used], prompts[used] - 1))
    return RecordedWorkload(Workload("recorded", recorded=pairs, hits=hits), len(rows), rate, cv,
                            length_stats(prompts, outputs), hit_rate(prompts[used], cached[used]))

