"""`python -m benchmarks.router`: what the router adds per streamed token, and the tokens/s it relays.

Starts a disaggregated stack (1 prefill + 1 decode), then streams the same greedy requests two ways,
alternating: through the router, and by calling the prefill and decode services directly as the router
would. Per-token latency = gaps between streamed tokens after the first; figures come from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass

import grpc

from distserve.v1 import router_pb2, router_pb2_grpc, worker_pb2, worker_pb2_grpc
from services.common.auth import TOOL
from services.common.convert import sampling_to_proto
from services.common.links import internal_channel
from services.common.net import free_port
from services.common.sampling import SamplingParams
from services.launcher.stack import Stack, StackConfig


@dataclass(slots=True)
class RelayFigures:
    tokens_per_request: int
    requests: int
    router_ms_per_token: float
    direct_ms_per_token: float
    added_ms_per_token: float
    router_tokens_per_s: float
    concurrent_streams: int
    concurrent_tokens_per_s: float


async def _gaps(stream) -> list[float]:
    stamps = []
    async for msg in stream:
        stamps.extend([time.perf_counter()] * len(msg.token_ids))
    return [b - a for a, b in zip(stamps[1:], stamps[2:])]  # after the first decoded token


async def via_router(channel: grpc.aio.Channel, prompt_ids: list[int], n: int,
                     metadata: tuple[tuple[str, str], ...] = ()) -> list[float]:
    """Gaps between the tokens of one greedy request streamed through the router."""
    stub = router_pb2_grpc.RouterStub(channel)
    return await _gaps(stub.Generate(router_pb2.GenerateRequest(
        prompt_token_ids=prompt_ids, max_tokens=n, temperature=0.0, ignore_eos=True), metadata=metadata))


async def direct(prefill: grpc.aio.Channel, decode: grpc.aio.Channel, prompt_ids: list[int], n: int, i: int) -> list[float]:
    """Gaps between the tokens of the same request made by calling prefill, then decode, as the router does."""
    sampling = sampling_to_proto(SamplingParams(max_tokens=n, ignore_eos=True, seed=0))
    reply = await worker_pb2_grpc.PrefillStub(prefill).Prefill(
        worker_pb2.PrefillRequest(request_id=f"direct-{i}", prompt_token_ids=prompt_ids, sampling=sampling))
    return await _gaps(worker_pb2_grpc.DecodeStub(decode).Decode(worker_pb2.DecodeRequest(
        request_id=f"direct-{i}", prompt_token_ids=prompt_ids, first_token=reply.first_token, sampling=sampling, kv=reply.kv)))


async def _measure(stack: Stack, requests: int, tokens: int, streams: int) -> RelayFigures:
    addr = {p.role: p.address for p in stack.procs if p.role}
    prompt_ids = list(range(3, 67))
    async with grpc.aio.insecure_channel(stack.router_address) as router, \
            internal_channel(addr["prefill"], TOOL) as prefill, internal_channel(addr["decode"], TOOL) as decode:
        await via_router(router, prompt_ids, 8)  # warm up both paths
        await direct(prefill, decode, prompt_ids, 8, -1)
        via, called = [], []
        for i in range(requests):
            via += await via_router(router, prompt_ids, tokens)
            called += await direct(prefill, decode, prompt_ids, tokens, i)
        start = time.perf_counter()
        await asyncio.gather(*(via_router(router, prompt_ids, tokens) for _ in range(streams)))
        concurrent = streams * tokens / (time.perf_counter() - start)
    router_ms, direct_ms = 1e3 * statistics.mean(via), 1e3 * statistics.mean(called)
    return RelayFigures(tokens, requests, router_ms, direct_ms, router_ms - direct_ms, 1e3 / router_ms, streams, concurrent)


def measure_stack(model: str, requests: int, tokens: int, streams: int, env: dict[str, str] | None = None) -> RelayFigures:
    """The figures of a fresh stack (its processes also get `env`)."""
    stack = Stack(StackConfig(model=model, grpc_port=free_port(), http_port=0, devices=("cpu:0", "cpu:1"),
                              log_level="WARNING", extra_env=env or {}))
    stack.start()
    try:
        return asyncio.run(_measure(stack, requests, tokens, streams))
    finally:
        stack.stop()


def run_bench_router(model: str, requests: int, tokens: int, streams: int, as_json: bool) -> int:
    figures = measure_stack(model, requests, tokens, streams)
    if as_json:
        print(json.dumps(asdict(figures)))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"router relay ({requests} alternating requests x {tokens} tokens, greedy)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in asdict(figures).items():
        table.add_row(name, f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.router", description="per-token latency the router "
                                     "adds, and tokens/s it relays")
    parser.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--streams", type=int, default=16, help="concurrent streams for the throughput figure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from services.engine.presets import resolve_model

    return run_bench_router(resolve_model(args.model), args.requests, args.tokens, args.streams, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
