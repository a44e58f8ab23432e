"""The request path's overheads as the served stack shows them, and the hand-offs the step fit needs.

The latency model itself is fitted to the served steps by the latency model's home (`services/common/step_model/served_fit.py`,
the same the planner service fits online). The fixed costs of the request path (hops, step-boundary waits,
relays) come from the router's records of lone requests (docs/architecture.md §3 timestamps) and the client's
clock.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace

from services.bench.loadgen import RequestResult
from services.common.stamps import Lifetime
from services.engine.step_log import StepRecord
from services.planner.serving import ServingOverheads


def joins_of(results: list[RequestResult]) -> Counter[float]:
    """How many handed-off requests joined each decode step (by the step's start, their decode start)."""
    return Counter(r.lifetime.decode_start for r in results
                   if r.ok and r.lifetime is not None and r.lifetime.xfer_start and r.lifetime.decode_start)


def _median(values) -> float:
    return max(0.0, statistics.median(values))


def _client_hops(life: list[tuple[RequestResult, Lifetime]]) -> dict[str, float]:
    """Medians of the hops every mode has: client → prefill queue, prefill step end → first token at the client."""
    return {"to_prefill": _median(t.prefill_queued - r.sent for r, t in life),
            "first_token": _median(r.first - t.prefill_end for r, t in life)}


def _to_decode(life: list[tuple[RequestResult, Lifetime]]) -> float:
    """Median of prefill step end → decode request at the decode instance."""
    return _median(t.decode_queued - t.prefill_end for _, t in life)


def path_overheads(lone: list[RequestResult], steps: list[StepRecord]) -> ServingOverheads:
    """Medians over lone requests (served one at a time, so no wait is queueing) of each hop of the request path;
    `steps`: the steps served meanwhile, for when each token's step ended. The hand-off's hops (to the decode
    instance, the reservation, the admission) only where the requests were disaggregated."""
    runs = [r for r in lone if r.ok and r.lifetime is not None and r.lifetime.decode_start and r.output_tokens > 1]
    if not runs:
        return ServingOverheads()
    decode_steps = [s for s in steps if s.kind == "decode"]

    def token(r: RequestResult) -> float:
        last = max((s for s in decode_steps if s.start < r.last), key=lambda s: s.start, default=None)
        return r.last - (last.start + last.seconds) if last is not None else 0.0

    life = [(r, r.lifetime) for r in runs]
    hops = _client_hops(life) | {"token": _median(token(r) for r in runs)}
    if all(t.xfer_start for _, t in life):
        hops |= {"to_decode": _to_decode(life),
                 "reserve": _median(t.xfer_start - t.decode_queued for _, t in life),
                 "admit": _median(t.decode_start - t.xfer_end for _, t in life)}
    return ServingOverheads(**hops)


def loaded_overheads(lone: ServingOverheads, results: list[RequestResult], steps: list[StepRecord],
                     join_s: float = 0.0) -> ServingOverheads:
    """The hops as a load shows them (`results` and the `steps` served meanwhile): every process on the path then
    shares its core with busy engines, and a token waits longer for its relay. Medians over the load's requests of
    the hops to the prefill instance, of the first token to the client and of the hand-off to the decode
    instance; the token's relay from the decode step that first carried the request (its start is the request's
    decode start) to the second token at the client. The reservation and the admission stay as `lone` measured
    them: under load they also hold the waits for KV blocks and for the step under way, which the simulator
    models itself; so does the relay where no decode step carries the request's start (colocated). `join_s`: the
    hand-off's cost to the decode engine, as `fit_steps` fitted it to these steps."""
    life = [(r, r.lifetime) for r in results if r.ok and r.lifetime is not None and r.lifetime.prefill_end]
    if not life:
        return lone
    hops = _client_hops(life)
    handed = [(r, t) for r, t in life if t.xfer_start]
    if handed:
        hops["to_decode"] = _to_decode(handed)
    ends = {s.start: s.start + s.seconds for s in steps if s.kind == "decode"}
    relays = [r.second - ends[t.decode_start] for r, t in handed if r.second and t.decode_start in ends]
    if relays:
        hops["token"] = _median(relays)
    if handed:
        hops["join"] = join_s
    return replace(lone, **hops)


def prefill_rows(steps: list[StepRecord]) -> list[tuple[int, int, int, float, float]]:
    """The prefill steps as results.json keeps them, (prompts, tokens, Σ prompt², start unix s, seconds), so that
    a fit can be replayed offline on any part of a run (the calibration's, a point's)."""
    return [(s.seqs, s.tokens, s.sum_sq, round(s.start, 4), round(s.seconds, 5)) for s in steps if s.kind == "prefill"]
