"""The recorded workload: lengths, rate and burstiness fitted to the request records the router appends to
Redis (read by `services.common.registry.read_records`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.planner.workload import Workload, length_stats


@dataclass(frozen=True, slots=True)
class RecordedWorkload:
    workload: Workload  # the recorded (prompt, output) pairs
    count: int
    rate: float  # req/s over the records' arrival span
    arrival_cv: float  # CV of inter-arrival gaps
    stats: dict[str, float]

    def as_dict(self) -> dict:
        return {"count": self.count, "rate": self.rate, "arrival_cv": self.arrival_cv, **self.stats}


def fit_records(records: list[dict[str, str]]) -> RecordedWorkload:
    """Lengths, rate and burstiness of recorded requests (records missing a field are skipped)."""
    rows = []
    for r in records:
        try:
            rows.append((int(r["prompt_tokens"]), int(r["output_tokens"]), float(r["arrival"])))
        except (KeyError, ValueError):
            continue
    if len(rows) < 2:
        raise ValueError("workload: fewer than two usable request records in Redis")
    rows.sort(key=lambda row: row[2])
    prompts, outputs, arrivals = (np.array(col) for col in zip(*rows))
    gaps = np.diff(arrivals)
    span = float(arrivals[-1] - arrivals[0])
    rate = (len(rows) - 1) / span if span > 0 else float("inf")
    cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 1.0
    pairs = tuple((int(p), max(int(o), 1)) for p, o in zip(prompts, outputs) if p >= 1)
    return RecordedWorkload(Workload("recorded", recorded=pairs), len(rows), rate, cv, length_stats(prompts, outputs))

