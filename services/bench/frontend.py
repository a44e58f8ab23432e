"""What the front-end features cost: the decode step with penalties on against off (a batch of 32), and the
TTFT of n=4 against n=1 on one prompt (disaggregated stack; n=4's TTFT: until every choice has a token).

Usage: python3 -m services.bench.frontend [--vocab 32000] [--batch 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace

import torch

from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model

PENALTIES = {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.2}


def decode_step_seconds(model: str, batch: int, params: SamplingParams, steps: int = 12) -> float:
    """Median decode-step time of `batch` requests (prompts of 64 tokens) once all are decoding."""
    engine = LLMEngine(EngineConfig(model, num_blocks=1024, max_num_seqs=batch, max_batch_tokens=batch * 64))
    try:
        for i in range(batch):
            engine.add_request(f"r{i}", [1, *((i * 7 + k) % 200 + 3 for k in range(63))], replace(params))
        times = []
        while engine.has_work() and len(times) < steps:
            start = time.perf_counter()
            engine.step()
            if engine.last_step is not None and engine.last_step.kind == "decode":
                times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        engine.close()


def sampler_seconds(batch: int, vocab: int, params: SamplingParams, repeats: int = 20) -> float:
    """Best time of one `sample` call on a [batch, vocab] step (prompts of 64, outputs of 40 tokens): the part
    of a step the penalties change, free of the forward pass's noise on a shared host."""
    from services.engine.sampler import sample
    from services.engine.sequence import Sequence

    seqs = [Sequence(str(i), list(range(3, 67)), params, output_ids=list(range(100, 140))) for i in range(batch)]
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sample(logits, seqs, (2,))
        times.append(time.perf_counter() - start)
    return min(times)


def ttft_seconds(model: str, n: int, repeats: int) -> float:
    """Median time to the first token of every one of the n choices, streamed through the OpenAI API."""
    import openai

    from services.common.net import free_port
    from services.common.redis_server import EmbeddedRedis
    from services.launcher.stack import Stack, StackConfig

    redis = EmbeddedRedis().start()
    stack = Stack(StackConfig(model=model, grpc_port=free_port(), http_port=free_port(), log_level="WARNING",
                              devices=("cpu:0", "cpu:1"), redis_url=redis.url, num_blocks=256))
    stack.start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{stack.config.http_port}/v1", api_key="-", max_retries=8)
        prompt = "the prefill phase is compute bound " * 12
        client.completions.create(model="", prompt=prompt, max_tokens=1)  # retried until the instances are listed
        times = []
        for _ in range(repeats + 1):  # the first warms up
            start, seen = time.perf_counter(), set()
            for event in client.completions.create(model="", prompt=prompt, n=n, max_tokens=4, temperature=1.0,
                                                   stream=True):
                seen.update(c.index for c in event.choices)
                if len(seen) == n:
                    times.append(time.perf_counter() - start)
                    break
        return statistics.median(times[1:])
    finally:
        stack.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary of the random-weight model")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=("step", "ttft"), help="one of the two measurements")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_model("small-llama", tmp, overrides={"vocab_size": args.vocab}))
        if args.only != "ttft":
            base = SamplingParams(max_tokens=64, ignore_eos=True, temperature=1.0, seed=0)
            rounds: dict[str, list[float]] = {"off": [], "on": []}
            for _ in range(args.repeats):  # alternated: the host's load drifts
                rounds["off"].append(decode_step_seconds(model, args.batch, base))
                rounds["on"].append(decode_step_seconds(model, args.batch, replace(base, **PENALTIES)))
            off, on = statistics.median(rounds["off"]), statistics.median(rounds["on"])
            s_off = sampler_seconds(args.batch, args.vocab, base)
            s_on = sampler_seconds(args.batch, args.vocab, replace(base, **PENALTIES))
            print(json.dumps({"vocab": args.vocab, "batch": args.batch, "decode_step_s_off": off,
                              "decode_step_s_penalties": on, "penalty_ratio": on / off, "sampler_s_off": s_off,
                              "sampler_s_penalties": s_on, "penalty_cost_over_step": (s_on - s_off) / off}),
                  flush=True)
        if args.only != "step":
            ttft1, ttft4 = ttft_seconds(model, 1, args.repeats), ttft_seconds(model, 4, args.repeats)
            print(json.dumps({"ttft_s_n1": ttft1, "ttft_s_n4": ttft4, "ttft_ratio": ttft4 / ttft1}), flush=True)


if __name__ == "__main__":
    main()
