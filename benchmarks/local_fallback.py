"""A follow-up sent down the local path to a decode instance that lost the conversation (evicted, or restarted,
while the router's index still lists it there): the streams decoding on that instance, when it declines (the
cap: the router pulls instead) and when it has no cap (it prefills the whole prompt in one of their steps).

Prints, per variant, the follow-up's path and TTFT and the streams' token gaps while it is served. Both engines
run in this process (real engines, a real kvxfer, gRPC between them), so absolute figures include their sharing
the host's cores. `python3 -m benchmarks.local_fallback [--prompt 1024] [--streams 4] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import grpc

from distserve.v1 import worker_pb2
from services.common.convert import sampling_to_proto
from services.common.sampling import SamplingParams
from services.engine.presets import resolve_model
from services.kvxfer.local import start_local_kvxfer
from tests.integration.kvxfer.multi_turn import Pair, start_pair

STREAM = sampling_to_proto(SamplingParams(max_tokens=200, temperature=0, ignore_eos=True))
FOLLOW_UP = sampling_to_proto(SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))


async def _stream(pair: Pair, request_id: str, prompt: list[int], times: list[float]) -> None:
    """A request decoding on the decode instance; the receipt time of each of its tokens."""
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(request_id=request_id, prompt_token_ids=prompt,
                                                                      sampling=STREAM))
    async for _ in pair.decode.Decode(worker_pb2.DecodeRequest(
            request_id=request_id, prompt_token_ids=prompt, first_token=prefilled.first_token, sampling=STREAM,
            kv=prefilled.kv)):
        times.append(time.perf_counter())


async def _follow_up(pair: Pair, prompt: list[int], cap: int) -> tuple[float, str]:
    """The follow-up by the router's local path, pulled when the decode declines: its TTFT and the path taken."""
    began = time.perf_counter()
    try:
        async for _ in pair.decode.Decode(worker_pb2.DecodeRequest(request_id="follow-up", prompt_token_ids=prompt,
                                                                   sampling=FOLLOW_UP, local_prefill_cap=cap)):
            return time.perf_counter() - began, "local"
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
            raise
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(request_id="pulled", prompt_token_ids=prompt,
                                                                      sampling=FOLLOW_UP))
    ttft = time.perf_counter() - began
    async for _ in pair.decode.Decode(worker_pb2.DecodeRequest(
            request_id="pulled", prompt_token_ids=prompt, first_token=prefilled.first_token, sampling=FOLLOW_UP,
            kv=prefilled.kv)):
        pass
    return ttft, "pull"


def _gaps(times: list[list[float]], start: float, end: float) -> list[float]:
    """The streams' gaps between tokens that overlap [start, end]."""
    return [b - a for t in times for a, b in zip(t, t[1:]) if b >= start and a <= end]


async def _variant(model: str, kvxfer: str, cap: int, prompt_len: int, streams: int) -> dict:
    pair = await start_pair(model, kvxfer, f"lf{cap}", "on", num_blocks=1024, block_size=16)
    try:
        times: list[list[float]] = [[] for _ in range(streams)]
        tasks = [asyncio.create_task(_stream(pair, f"s{i}", [1, *(3 + (i * 11 + j) % 250 for j in range(63))],
                                             times[i])) for i in range(streams)]
        while min(len(t) for t in times) < 20:  # every stream decoding
            await asyncio.sleep(0.05)
        calm = time.perf_counter()
        await asyncio.sleep(1.0)
        start = time.perf_counter()
        lost = [1, *(3 + (i * 7) % 250 for i in range(prompt_len - 11))]  # never computed by this decode instance
        ttft, path = await _follow_up(pair, lost + list(range(20, 30)), cap)
        end = time.perf_counter()
        await asyncio.gather(*tasks)
        before, during = _gaps(times, calm, start - 0.1), _gaps(times, start, end)
        return {"cap": cap, "path": path, "follow_up_ttft_ms": 1e3 * ttft,
                "tpot_before_ms": 1e3 * statistics.mean(before), "tpot_during_ms": 1e3 * statistics.mean(during),
                "longest_gap_during_ms": 1e3 * max(during)}
    finally:
        for close in pair.closers:
            await close()


async def main(prompt_len: int, streams: int) -> list[dict]:
    model = resolve_model("small-llama")
    host = await start_local_kvxfer(quiet=True)
    try:
        return [await _variant(model, host.address, cap, prompt_len, streams) for cap in (0, 64)]
    finally:
        host.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", type=int, default=1024, help="tokens of the lost conversation's prompt")
    parser.add_argument("--streams", type=int, default=4, help="requests decoding on the decode instance")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = asyncio.run(main(args.prompt, args.streams))
    if args.json:
        print(json.dumps(rows, indent=1))
    for r in rows:
        print(f"cap {r['cap']:>3}: follow-up by {r['path']:<5} TTFT {r['follow_up_ttft_ms']:7.1f} ms | streams' TPOT "
              f"{r['tpot_before_ms']:5.1f} ms before, {r['tpot_during_ms']:6.1f} ms while it is served, longest gap "
              f"{r['longest_gap_during_ms']:7.1f} ms")
