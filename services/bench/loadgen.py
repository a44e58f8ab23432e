"""The load generator: drives conversations over one gRPC channel, times every token on receipt, then joins the
router's lifecycle records (Redis stream `ds:requests`) for the stage breakdown.

Conversations start at their arrival times (open loop); within one, a turn is sent only after the previous turn's
answer and its think time (closed loop), its prompt the conversation so far: every earlier turn's message and the
answer the server returned, then its own message. A single request is a conversation of one turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import grpc
import redis

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.redis_auth import client as redis_client
from services.common.registry import newest_record_id, records_after
from services.common.stamps import Lifetime

STAMP_FIELDS = Lifetime.__dataclass_fields__.keys()


@dataclass(frozen=True, slots=True)
class Turn:
    request_id: str
    message_ids: tuple[int, ...]  # what it adds to the conversation (a first turn: its whole prompt)
    max_tokens: int
    think_s: float = 0.0  # seconds from the previous turn's answer to this turn


@dataclass(frozen=True, slots=True)
class Conversation:
    arrival: float  # its first turn's, seconds from the start of the run
    turns: tuple[Turn, ...]


def renamed(conversations: list[Conversation], suffix: str) -> list[Conversation]:
    """The same conversations, every request id followed by `suffix` (a rerun of the same requests)."""
    return [replace(c, turns=tuple(replace(t, request_id=t.request_id + suffix) for t in c.turns)) for c in conversations]


def single(request_id: str, prompt_ids: tuple[int, ...], max_tokens: int, arrival: float = 0.0) -> Conversation:
    """One request: a conversation of one turn."""
    return Conversation(arrival, (Turn(request_id, prompt_ids, max_tokens),))


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
    turn: int = 0  # its place in its conversation (0: the first)
    cached_tokens: int = 0  # prompt tokens not computed (a prefix cache had them), as the router reports them
    decode_cached_tokens: int = 0  # ... and those the decode instance's cache held, not pulled

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


async def run_load(address: str, conversations: list[Conversation], on_done: Callable[[], None] = lambda: None,
                   timeout_s: float = 600.0, metadata: tuple[tuple[str, str], ...] = (),
                   cache_salt: str = "") -> list[RequestResult]:
    """Starts every conversation at its arrival time, sends its turns with `metadata` (e.g. their SLO) and
    `cache_salt` (when given: they share cached K/V with no other run's) and waits for all; the results in the
    order of the conversations and their turns."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        loop = asyncio.get_running_loop()
        began = loop.time()
        tasks = []
        for conversation in conversations:
            delay = began + conversation.arrival - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_converse(stub, conversation, timeout_s, on_done, metadata, cache_salt)))
        return [result for results in await asyncio.gather(*tasks) for result in results]


async def _converse(stub: router_pb2_grpc.RouterStub, conversation: Conversation, timeout_s: float,
                    on_done: Callable[[], None], metadata: tuple[tuple[str, str], ...],
                    cache_salt: str) -> list[RequestResult]:
    """Its turns one after another; after a failed turn the rest fail unsent."""
    history: tuple[int, ...] = ()
    results = []
    for k, turn in enumerate(conversation.turns):
        prompt = history + turn.message_ids
        if results and not results[-1].ok:
            results.append(RequestResult(turn.request_id, len(prompt), error="an earlier turn failed", turn=k))
            on_done()
            continue
        if k and turn.think_s > 0:
            await asyncio.sleep(turn.think_s)
        answer: list[int] = []
        message = router_pb2.GenerateRequest(prompt_token_ids=prompt, max_tokens=turn.max_tokens, temperature=0.0,
                                             ignore_eos=True, request_id=turn.request_id, cache_salt=cache_salt or None)
        results.append(await _call(stub, message, k, answer, timeout_s, on_done, metadata))
        history = prompt + tuple(answer)
    return results


async def _call(stub: router_pb2_grpc.RouterStub, message: router_pb2.GenerateRequest, turn: int, answer: list[int],
                timeout_s: float, on_done: Callable[[], None], metadata: tuple[tuple[str, str], ...]) -> RequestResult:
    """One Generate call; the tokens received are appended to `answer`."""
    result = RequestResult(message.request_id, len(message.prompt_token_ids), sent=time.time(), turn=turn)
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
            answer.extend(chunk.token_ids)
            result.cached_tokens = max(result.cached_tokens, chunk.cached_tokens)
            result.decode_cached_tokens = max(result.decode_cached_tokens, chunk.decode_cached_tokens)
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
