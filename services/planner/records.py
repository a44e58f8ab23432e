"""The recorded workload: request records the router appends to the Redis stream `ds:requests`, and the
current plan at key `ds:plan`."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import redis

from services.planner.prefix import fit_hits, hit_rate
from services.planner.workload import Workload, length_stats

STREAM, PLAN_KEY = "ds:requests", "ds:plan"


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


def read_records(client: redis.Redis, max_records: int) -> list[dict[str, str]]:
    """The most recent records, newest first (XREVRANGE)."""
    entries = client.xrevrange(STREAM, count=max_records)
    return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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


def save_plan(client: redis.Redis, plan: dict) -> None:
    client.set(PLAN_KEY, json.dumps(plan))


def load_plan(client: redis.Redis) -> dict | None:
    raw = client.get(PLAN_KEY)
    return json.loads(raw) if raw else None
