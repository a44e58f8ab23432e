"""The latency model and the request path's overheads as the served stack shows them.

The profile (`distserve profile`) times forward passes on an idle engine; a served step also pays for the step
loop, streaming its tokens over gRPC, and whatever else shares its core (the router, the load generator, Redis,
kvxfer). Every instance logs each step's batch shape and period (`services/engine/step_log.py`); the bench reads
those logs through the Stats RPC and fits the latency model's coefficients to them with the profiler's own
least squares. The fixed costs of the request path (hops, step-boundary waits, relays) come from the router's
records of lone requests (docs/architecture.md §3 timestamps) and the client's clock.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.bench.loadgen import RequestResult
from services.common.auth import TOOL
from services.common.links import internal_channel
from services.common.registry import Registry
from services.common.stamps import Lifetime
from services.engine.step_log import StepRecord
from services.planner.latency import DecodeCoeffs, TPCoefficients
from services.planner.profile import fit_prefill, nonneg_lstsq
from services.planner.serving import ServingOverheads

STUBS = {"prefill": worker_pb2_grpc.PrefillStub, "decode": worker_pb2_grpc.DecodeStub}
MIN_TOKEN_COUNTS = 3  # distinct prefill batch token counts before the prefill terms are fitted to served steps
MIN_BATCH_SIZES = 2  # distinct decode batch sizes before the decode terms are


async def _steps(redis_url: str, since: float) -> list[StepRecord]:
    registry = Registry.from_url(redis_url)
    try:
        instances = await registry.instances()
    finally:
        await registry.close()
    out: list[StepRecord] = []
    for info in instances:
        async with internal_channel(info.address, TOOL) as channel:
            stub = STUBS.get(info.role, worker_pb2_grpc.ColocatedStub)(channel)
            reply = await stub.Stats(worker_pb2.InstanceStatsRequest(steps_since=since), timeout=10)
        out += [StepRecord(s.kind, s.seqs, s.tokens, s.sum_sq, s.context, s.start, s.seconds) for s in reply.step_log]
    return out


def served_steps(redis_url: str, since: float) -> list[StepRecord]:
    """The steps every registered instance served from `since` (unix seconds) on."""
    return asyncio.run(_steps(redis_url, since))


@dataclass(frozen=True, slots=True)
class ServedFit:
    coeffs: TPCoefficients
    prefill_steps: int  # steps the prefill terms were fitted to (0: kept as profiled)
    decode_steps: int
    join_s: float = 0.0  # decode-engine seconds one hand-off costs (fitted beside the decode terms)

    def as_dict(self) -> dict[str, float]:
        p, d = self.coeffs.prefill, self.coeffs.decode_small
        return {"prefill_c0": p.c0, "prefill_per_token": p.per_token, "prefill_per_sq": p.per_sq,
                "decode_c0": d.c0, "decode_per_ctx": d.per_ctx, "decode_per_req": d.per_req, "join_s": self.join_s,
                "prefill_steps": self.prefill_steps, "decode_steps": self.decode_steps}


def joins_of(results: list[RequestResult]) -> Counter[float]:
    """How many handed-off requests joined each decode step (by the step's start, their decode start)."""
    return Counter(r.lifetime.decode_start for r in results
                   if r.ok and r.lifetime is not None and r.lifetime.xfer_start and r.lifetime.decode_start)


def fit_decode_joins(steps: list[StepRecord], per_ctx: float, joins: Counter[float]) -> tuple[DecodeCoeffs, float]:
    """Decode terms and the cost of a hand-off, fitted together. A request joining a decode step may slow the step
    before it (its Decode RPC and the pull's RPC arrive while that one runs), its own and the next one; each
    step's seconds, less the kept attention term, are fitted by non-negative least squares to (1, requests, joins
    at the next step, at this one, at the previous one). The cost is the sum of the three join terms. Fitted
    apart, the fixed and per-request terms would absorb the hand-offs' average cost, which the simulator then
    charged again per hand-off. Steps are taken in time order (neighbours: the bench's one decode instance)."""
    dec = sorted(steps, key=lambda s: s.start)
    at = np.array([joins.get(s.start, 0) for s in dec], dtype=float)
    target = np.array([s.seconds - per_ctx * s.context for s in dec])
    features = np.column_stack([np.ones(len(dec)), [s.seqs for s in dec],
                                np.append(at[1:], 0.0), at, np.insert(at[:-1], 0, 0.0)])
    coef = nonneg_lstsq(features, target)
    return DecodeCoeffs(float(coef[0]), per_ctx, float(coef[1])), float(coef[2:].sum())


def fit_steps(steps: list[StepRecord], profiled: TPCoefficients, joins: Counter[float] | None = None) -> ServedFit:
    """The latency model fitted to served prefill and decode steps, by the profiler's least squares (steps that
    mix the two phases, as chunked prefill's do, are left out: the model composes their cost from both).

    The attention terms stay as profiled (prefill's per squared prompt token, decode's per context token: the
    profile measures them over prompts and contexts up to thousands of tokens, which one workload's served
    batches do not span, so fitted they extrapolate badly); the fixed, per-token and per-request terms, which
    carry what serving adds per step and per streamed token, are fitted. A phase whose steps show too few
    distinct shapes (prefill: MIN_TOKEN_COUNTS token counts; decode: MIN_BATCH_SIZES batch sizes) keeps its
    profiled terms. With `joins` (`joins_of` the requests served meanwhile), the hand-off's cost to the decode
    engine is fitted beside the decode terms (`fit_decode_joins`)."""
    pre = [r for r in steps if r.kind == "prefill"]
    dec = [r for r in steps if r.kind == "decode"]
    fit_pre = len({r.tokens for r in pre}) >= MIN_TOKEN_COUNTS
    fit_dec = len({r.seqs for r in dec}) >= MIN_BATCH_SIZES
    p = (fit_prefill([(r.tokens, r.sum_sq, r.seconds) for r in pre], profiled.prefill.per_sq) if fit_pre
         else profiled.prefill)
    d, join_s = (fit_decode_joins(dec, profiled.decode_small.per_ctx, joins or Counter()) if fit_dec
                 else (profiled.decode_small, 0.0))
    coeffs = TPCoefficients(prefill=p, decode_small=d, decode_large=d)
    return ServedFit(coeffs, len(pre) if fit_pre else 0, len(dec) if fit_dec else 0, join_s)


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
