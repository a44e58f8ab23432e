"""The stack's own latency model, fitted online: a rolling window of the steps the registered instances served
(their Stats RPC, `steps_since`), refitted on a timer per instance kind and device, published at `ds:model`.

A profile (`distserve profile`) only seeds the fit: it gives the attention terms, which one workload's served
batches do not span (`services.common.step_model.served_fit`); without one every term is fitted to the window.
The published model (`OnlineFit.model`, also `GET /v1/model`) is what the router's admission predicts with and
what replanning plans with.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import grpc
from redis.exceptions import RedisError

from distserve.v1 import worker_pb2, worker_pb2_grpc
from services.common.auth import PLANNER
from services.common.links import internal_channel
from services.common.registry import InstanceInfo, Registry
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.served_fit import fit_decode_steps, fit_prefill_steps, residuals
from services.engine.step_log import StepRecord

log = logging.getLogger(__name__)
STUBS = {"prefill": worker_pb2_grpc.PrefillStub, "decode": worker_pb2_grpc.DecodeStub}


async def instance_steps(info: InstanceInfo, since: float) -> list[StepRecord]:
    """The steps one instance served from `since` (unix seconds, > 0) on."""
    async with internal_channel(info.address, PLANNER) as channel:
        stub = STUBS.get(info.role, worker_pb2_grpc.ColocatedStub)(channel)
        reply = await stub.Stats(worker_pb2.InstanceStatsRequest(steps_since=since), timeout=10)
    return [StepRecord(s.kind, s.seqs, s.tokens, s.sum_sq, s.context, s.start, s.seconds) for s in reply.step_log]


async def registered_steps(redis_url: str, since: float) -> list[StepRecord]:
    """The steps every registered instance served from `since` on."""
    registry = Registry.from_url(redis_url)
    try:
        instances = await registry.instances()
    finally:
        await registry.close()
    out: list[StepRecord] = []
    for info in instances:
        out += await instance_steps(info, since)
    return out


def served_steps(redis_url: str, since: float) -> list[StepRecord]:
    """`registered_steps`, from synchronous code."""
    return asyncio.run(registered_steps(redis_url, since))


def _median_gap(records: list[dict[str, str]], since: float, keys: tuple[str, ...],
                gap: Callable[..., float]) -> float | None:
    """The median (at least 0) of gap(arrival, *stamps) over the router's records that arrived from `since` on
    and carry every stamp of `keys`, or None where none does."""
    gaps = []
    for r in records:
        try:
            arrival, *stamps = (float(r[k]) for k in ("arrival", *keys))
        except (KeyError, ValueError):
            continue
        if arrival >= since and all(stamps):
            gaps.append(gap(arrival, *stamps))
    return max(0.0, statistics.median(gaps)) if gaps else None


def ttft_hops(records: list[dict[str, str]], since: float) -> float | None:
    """What a request's TTFT holds besides the prefill queue and step: arrival → prefill queue plus prefill end →
    first token at the router."""
    return _median_gap(records, since, ("prefill_queued", "prefill_end", "first_token"),
                       lambda arrival, queued, end, first: (queued - arrival) + (first - end))


def handoff(records: list[dict[str, str]], since: float) -> float | None:
    """The hand-off of a disaggregated request: first token at the router → the decode instance's first step
    (dispatch, KV pull, decode queue)."""
    return _median_gap(records, since, ("first_token", "decode_start"), lambda _arrival, first, start: start - first)


def kind_key(role: str, device: str) -> str:
    """The model's key of an instance kind on a device, e.g. `prefill@cpu:0` (the router looks it up so)."""
    return f"{role}@{device}"


@dataclass(slots=True)
class Window:
    """The steps of one instance kind on one device, newest last, bounded in age and count."""

    steps: deque[StepRecord]
    instances: set[str] = field(default_factory=set)

    def prune(self, oldest: float) -> None:
        while self.steps and self.steps[0].start < oldest:
            self.steps.popleft()


class OnlineFit:
    """Collects served steps from the registered instances and fits the latency model to them."""

    def __init__(self, registry: Registry, seed: TPCoefficients | None = None, seed_source: str = "",
                 window_s: float = 300.0, max_steps: int = 5000) -> None:
        self.registry = registry
        self.seed = seed
        self.seed_source = seed_source
        self.window_s = window_s
        self.max_steps = max_steps
        self.windows: dict[str, Window] = {}
        self.seen: dict[str, float] = {}  # instance id → start of the newest step read from it
        self.records: list[dict[str, str]] = []  # the router's latest request records
        self.model: dict | None = None

    def ingest(self, role: str, device: str, instance_id: str, steps: list[StepRecord]) -> None:
        """Adds an instance's steps not seen before to its kind's window."""
        last = self.seen.get(instance_id, 0.0)
        fresh = sorted((s for s in steps if s.start > last), key=lambda s: s.start)
        window = self.windows.setdefault(kind_key(role, device), Window(deque(maxlen=self.max_steps)))
        window.instances.add(instance_id)
        window.steps.extend(fresh)
        if fresh:
            self.seen[instance_id] = fresh[-1].start

    async def collect(self, now: float | None = None) -> int:
        """Reads the new steps of every registered instance; returns how many instances answered."""
        now = time.time() if now is None else now
        answered = 0
        for info in await self.registry.instances():
            since = max(self.seen.get(info.id, 0.0), now - self.window_s)
            try:
                steps = await instance_steps(info, since)
            except grpc.aio.AioRpcError as err:
                log.info("no steps from %s: %s", info.id, err.code().name)
                continue
            self.ingest(info.role, info.device, info.id, steps)
            answered += 1
        self.records = await self.registry.recent_records(self.max_steps)
        return answered

    def refit(self, now: float | None = None) -> dict:
        """The model fitted to every window (older steps dropped first); kept as `model` and returned."""
        now = time.time() if now is None else now
        kinds = {}
        for key, window in self.windows.items():
            window.prune(now - self.window_s)
            steps = list(window.steps)
            if steps:
                kinds[key] = self._fit_kind(key, window, steps)
        self.model = {"fitted_at": now, "window_s": self.window_s, "max_steps": self.max_steps,
                      "seed": self.seed_source or None, "kinds": kinds,
                      "ttft_hops_s": ttft_hops(self.records, now - self.window_s),
                      "handoff_s": handoff(self.records, now - self.window_s)}
        return self.model

    def _fit_kind(self, key: str, window: Window, steps: list[StepRecord]) -> dict:
        seed = self.seed
        prefill = fit_prefill_steps(steps, seed.prefill.per_sq if seed else None)
        decoded = fit_decode_steps(steps, seed.decode_small.per_ctx if seed else None)
        decode, join_s = decoded if decoded is not None else (None, 0.0)
        role, device = key.split("@", 1)
        return {"role": role, "device": device, "instances": sorted(window.instances),
                "prefill": asdict(prefill) if prefill else None, "decode": asdict(decode) if decode else None,
                "join_s": join_s,
                "window": {"steps": len(steps), "prefill_steps": sum(s.kind == "prefill" for s in steps),
                           "decode_steps": sum(s.kind == "decode" for s in steps),
                           "from": steps[0].start, "to": steps[-1].start + steps[-1].seconds},
                "residuals": {phase: asdict(r) for phase, r in residuals(steps, prefill, decode).items()}}

    async def publish(self) -> None:
        """Stores the model at `ds:model` for the routers and the replanning loops."""
        if self.model is not None:
            await self.registry.publish_model(self.model)

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Collect, refit and publish every `interval` seconds until `stop` is set."""
        while not stop.is_set():
            try:
                await self.collect()
                await asyncio.to_thread(self.refit)
                await self.publish()
            except (RedisError, OSError) as err:
                log.warning("model fit skipped: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
