"""Where a disaggregated request's first inter-token gap (its hand-off to the decode instance) goes under load.

Starts a disaggregated stack on cpu:0 + cpu:1 (the bench's), sends the bench's chatbot requests (seed 0) at each
rate given, and splits every request's first → second token gap at the client by the router's stamps:
  to decode   client's first token → decode request queued at the decode instance
  reserve     → its KV blocks reserved
  pull        → K/V pulled (kvxfer)
  admit       → the decode step that first carries it starts (waits for the step under way to end)
  step+relay  → the second token at the client (that step, then decode → router → client)

    python3 scripts/handoff_probe.py [--model DIR] RATE [RATE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import grpc

from distserve.v1 import router_pb2, router_pb2_grpc
from services.bench.loadgen import BenchRequest, RequestResult, attach_stages, stream_tail
from services.bench.runner import Bench, BenchConfig, serving, warm_up
from services.engine.cli import resolve_model

PARTS = {"to decode": ("first", "decode_queued"), "reserve": ("decode_queued", "xfer_start"),
         "pull": ("xfer_start", "xfer_end"), "admit": ("xfer_end", "decode_start"),
         "step+relay": ("decode_start", "second")}


async def _send(stub: router_pb2_grpc.RouterStub, req: BenchRequest) -> RequestResult:
    result = RequestResult(req.request_id, len(req.prompt_ids), sent=time.time())
    message = router_pb2.GenerateRequest(prompt_token_ids=req.prompt_ids, max_tokens=req.max_tokens,
                                         temperature=0.0, ignore_eos=True, request_id=req.request_id)
    async for chunk in stub.Generate(message, timeout=600):
        for _ in chunk.token_ids:
            result.output_tokens += 1
            if result.output_tokens == 1:
                result.first = time.time()
            elif result.output_tokens == 2:
                result.second = time.time()
    result.done = time.time()
    return result


async def _load(address: str, requests: list[BenchRequest]) -> list[RequestResult]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        began, tasks = time.monotonic(), []
        for req in requests:
            await asyncio.sleep(max(0.0, began + req.arrival - time.monotonic()))
            tasks.append(asyncio.create_task(_send(stub, req)))
        return list(await asyncio.gather(*tasks))


def _split(result: RequestResult) -> dict[str, float]:
    times = {"first": result.first, "second": result.second, **result.lifetime.to_record()}
    return {part: times[b] - times[a] for part, (a, b) in PARTS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rates", type=float, nargs="+")
    parser.add_argument("--model", default="small-llama")
    args = parser.parse_args()
    cfg = BenchConfig(model=resolve_model(args.model), num_requests=60, ttft=1.0, tpot=0.015)
    bench = Bench(cfg)
    sample = bench.samples["chatbot"]
    with serving(cfg, "disagg") as served:
        warm_up(cfg, served, sample, bench.kv_bytes, None)
        for rate in args.rates:
            arrivals = sample.arrivals(rate)
            requests = [BenchRequest(f"probe-{rate}-{i}", sample.prompt_ids[i], int(sample.outputs[i]),
                                     float(arrivals[i])) for i in range(len(sample))]
            tail = stream_tail(served.redis_url)
            results = asyncio.run(_load(served.address, requests))
            attach_stages(served.redis_url, results, tail)
            splits = [_split(r) for r in results if r.second and r.lifetime is not None]
            gaps = sorted(1000 * (r.second - r.first) for r in results if r.second)
            print(f"{rate} req/s, {len(splits)} requests: first gap median {statistics.median(gaps):.1f} ms, "
                  f"p90 {gaps[int(0.9 * len(gaps))]:.1f} ms")
            for part in PARTS:
                values = sorted(1000 * s[part] for s in splits)
                print(f"  {part:11s} median {statistics.median(values):5.1f}  p90 {values[int(0.9 * len(values))]:5.1f}"
                      f"  mean {statistics.mean(values):5.1f} ms")


if __name__ == "__main__":
    main()
