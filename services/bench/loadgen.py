"""The load generator: fires Generate calls at their arrival times over one gRPC channel, times every token on
receipt, then joins the router's lifecycle records (Redis stream `ds:requests`) for the stage breakdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import redis

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.redis_auth import client as redis_client
from services.common.registry import newest_record_id, records_after
from services.common.stamps import Lifetime

STAMP_FIELDS = Lifetime.__dataclass_fields__.keys()


@dataclass(frozen=True, slots=True)
class BenchRequest:
    request_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    arrival: float  # seconds from the start of the run


@dataclass(slots=True)
class RequestResult:
    """What the client saw of one request (wall-clock seconds), and the router's stage breakdown."""

    request_id: str
    prompt_tokens: int
    output_tokens: int = 0
    sent: float = 0.0
    first: float = 0.0
    second: float = 0.0  # the second token's receipt (0 for a one-token output)
    last: float = 0.0  # the last token's receipt (the stream's end comes after: the router's bookkeeping, the status)
    error: str = ""
    stages: dict[str, float] = field(default_factory=dict)
    lifetime: Lifetime | None = None  # the router's record of it

    @property
    def ok(self) -> bool:
        return not self.error and self.first > 0

    @property
    def ttft(self) -> float:
        return self.first - self.sent if self.ok else float("inf")

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first, to the last token's receipt (0 for a one-token output, as in
        the planner)."""
        if not self.ok:
            return float("inf")
        return (self.last - self.first) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0

    @property
    def first_gap(self) -> float | None:
        """First token → second token at the client: disaggregated, the hand-off to the decode instance."""
        return self.second - self.first if self.ok and self.second else None

    @property
    def e2e(self) -> float:
        """Sent → last token."""
        return self.last - self.sent if self.ok else float("inf")


async def run_load(address: str, requests: list[BenchRequest], on_done: Callable[[], None] = lambda: None,
                   timeout_s: float = 600.0, metadata: tuple[tuple[str, str], ...] = ()) -> list[RequestResult]:
    """Sends every request at its arrival time (open loop), with `metadata` (e.g. its SLO), and waits for all."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        loop = asyncio.get_running_loop()
        began = loop.time()
        tasks = []
        for req in requests:
            delay = began + req.arrival - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_call(stub, req, timeout_s, on_done, metadata)))
        return list(await asyncio.gather(*tasks))


async def _call(stub: router_pb2_grpc.RouterStub, req: BenchRequest, timeout_s: float,
                on_done: Callable[[], None], metadata: tuple[tuple[str, str], ...] = ()) -> RequestResult:
    result = RequestResult(req.request_id, len(req.prompt_ids), sent=time.time())
    message = router_pb2.GenerateRequest(prompt_token_ids=req.prompt_ids, max_tokens=req.max_tokens, temperature=0.0,
                                         ignore_eos=True, request_id=req.request_id)
    try:
        async for chunk in stub.Generate(message, timeout=timeout_s, metadata=metadata or None):
            if chunk.token_ids:
                now = result.last = time.time()
                if not result.first:
                    result.first = now
                    if len(chunk.token_ids) > 1:
                        result.second = now
                elif not result.second:
                    result.second = now
            result.output_tokens += len(chunk.token_ids)
    except grpc.aio.AioRpcError as exc:
        result.error = f"{exc.code().name}: {exc.details()}"
    finally:
        on_done()
    return result


def stream_tail(redis_url: str) -> str:
    """The id of the newest request record ('0' when none): read records after it with `attach_stages`."""
    return newest_record_id(redis_client(redis.Redis, redis_url, decode_responses=True))


def attach_stages(redis_url: str, results: list[RequestResult], after: str, timeout_s: float = 10.0) -> None:
    """Fills each completed result's `stages` from its record, found by the client's id (the record's `label`;
    its `request_id` is the router's own); the router writes a record just after the last token, so this waits
    up to `timeout_s` for stragglers."""
    client = redis_client(redis.Redis, redis_url, decode_responses=True)
    wanted = {r.request_id: r for r in results if r.ok}
    deadline = time.monotonic() + timeout_s
    cursor = after
    while wanted and time.monotonic() < deadline:
        entries = records_after(client, cursor)
        for entry_id, fields in entries:
            cursor = entry_id
            result = wanted.pop(fields.get("label", ""), None)
            if result is not None:
                result.lifetime = Lifetime(**{k: float(v) for k, v in fields.items() if k in STAMP_FIELDS})
                result.stages = result.lifetime.stages()
        if wanted and not entries:
            time.sleep(0.1)
