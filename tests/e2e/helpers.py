"""Helpers for the end-to-end tests: start a stack, call it, read instance stats."""

from __future__ import annotations

import asyncio
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import redis

from distserve.v1 import router_pb2, router_pb2_grpc, worker_pb2, worker_pb2_grpc
from services.common.auth import TOOL, token_metadata
from services.common.links import blocking_channel
from services.common.net import free_port
from services.common.secret import client_secret
from services.launcher.stack import Stack, StackConfig

STUBS = {"prefill": worker_pb2_grpc.PrefillStub, "decode": worker_pb2_grpc.DecodeStub,
         "colocated": worker_pb2_grpc.ColocatedStub, "chunked": worker_pb2_grpc.ColocatedStub}


@contextmanager
def running_stack(model: str, redis_url: str, **overrides) -> Iterator[Stack]:
    # Leases outlive wait_idle's bound, so a lease nobody released shows up as blocks in use.
    settings = {"devices": ("cpu:0", "cpu:1"), "num_blocks": 256, "max_batch_tokens": 128, "lease_ttl_s": 120.0,
                "log_level": "WARNING", **overrides}
    config = StackConfig(model=model, grpc_port=free_port(), http_port=free_port(), redis_url=redis_url, **settings)
    redis.Redis.from_url(redis_url).flushdb()
    stack = Stack(config)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


async def generate(address: str, prompt: str = "", prompt_ids: list[int] | None = None, api_key: str = "",
                   **fields) -> list[router_pb2.GenerateResponse]:
    metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
    async with grpc.aio.insecure_channel(address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        request = router_pb2.GenerateRequest(prompt=prompt, prompt_token_ids=prompt_ids or [], **fields)
        return [r async for r in stub.Generate(request, timeout=120, metadata=metadata)]


def instance_stats(stack: Stack, steps_since: float = 0.0) -> list[worker_pb2.InstanceStatsResponse]:
    """Every instance's stats; `steps_since` (unix seconds) adds the records of the steps since then."""
    out = []
    request = worker_pb2.InstanceStatsRequest(steps_since=steps_since)
    for proc in stack.procs:
        if proc.role in STUBS:
            with blocking_channel(proc.address) as channel:
                out.append(STUBS[proc.role](channel).Stats(request, timeout=10,
                                                           metadata=token_metadata(client_secret(), TOOL)))
    return out


async def wait_idle(stack: Stack, timeout_s: float = 30.0) -> list[worker_pb2.InstanceStatsResponse]:
    """Instance stats once no instance holds a KV block (or the last reading when time runs out)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        stats = await asyncio.to_thread(instance_stats, stack)
        if all(s.blocks_used == 0 for s in stats) or asyncio.get_running_loop().time() > deadline:
            return stats
        await asyncio.sleep(0.2)


def recorded_requests(redis_url: str) -> list[dict[str, str]]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    return [fields for _, fields in client.xrange("ds:requests")]


READY = "ready; Ctrl-C stops everything"  # `distserve up`'s last line once every service serves


def read_until_ready(process: subprocess.Popen, timeout_s: float) -> list[str]:
    """The lines `up` prints up to its ready line (the rest of its output is drained, so it never blocks)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline, seen = time.monotonic() + timeout_s, []
    while not seen or seen[-1] != READY:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))  # queue.Empty: not ready in time
        assert line is not None, f"`distserve up` exited ({process.wait()}) before it was ready: {seen}"
        seen.append(line)
    return seen
