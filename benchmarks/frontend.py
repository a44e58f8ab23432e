"""What the front-end features cost: the whole decode step with penalties on against off (a batch of 32), and
the TTFT of n=4 against n=1 on one prompt (disaggregated stack; n=4's TTFT: until every choice has a token).

The step figure interleaves: one engine holds the 32 decoding requests and runs its steps in pairs, one with
the penalties on and one off, in the order off-on, on-off, ... (so a drift of the host's load, or the context
growing by a token a step, weighs on both alike); each pair gives a ratio, and the median of the pairs' ratios
is the figure. Times are this thread's CPU time (torch runs on it alone): other processes do not count.

Usage: python3 -m benchmarks.frontend [--vocab 32000] [--batch 32] [--pairs 40] [--only step|ttft]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, replace

import torch

from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model

PENALTIES = {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.2}


@dataclass(frozen=True, slots=True)
class PairedSteps:
    """Per pair of consecutive decode steps: seconds (CPU) with the penalties off, and on."""

    off: list[float]
    on: list[float]

    def summary(self) -> dict[str, float]:
        return {"decode_step_s_off": statistics.median(self.off), "decode_step_s_penalties": statistics.median(self.on),
                "penalty_ratio": statistics.median(b / a for a, b in zip(self.off, self.on)),
                "penalty_ratio_p10": statistics.quantiles([b / a for a, b in zip(self.off, self.on)], n=10)[0],
                "penalty_ratio_p90": statistics.quantiles([b / a for a, b in zip(self.off, self.on)], n=10)[-1]}


def paired_decode_steps(model: str, batch: int, pairs: int, penalties: dict) -> PairedSteps:
    """Whole engine steps (schedule, forward, sampling, update) of `batch` decoding requests (prompts of 64
    tokens), alternately with and without `penalties`, interleaved as the module docstring says."""
    off = SamplingParams(max_tokens=2 * pairs + 8, ignore_eos=True, temperature=1.0, seed=0)
    on = replace(off, **penalties)
    engine = LLMEngine(EngineConfig(model, num_blocks=1024, max_num_seqs=batch, max_batch_tokens=batch * 64))
    try:
        for i in range(batch):
            engine.add_request(f"r{i}", [1, *((i * 7 + k) % 200 + 3 for k in range(63))], replace(off))
        while engine.last_step is None or engine.last_step.kind != "decode":  # prefills, then a first decode
            engine.step()
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(pairs):
            for penalised in ((False, True) if i % 2 == 0 else (True, False)):
                for seq in engine.scheduler.running:
                    seq.params = on if penalised else off
                start = time.thread_time()
                engine.step()
                times[penalised].append(time.thread_time() - start)
        return PairedSteps(times[False], times[True])
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
    parser.add_argument("--repeats", type=int, default=5, help="TTFT: requests per n")
    parser.add_argument("--pairs", type=int, default=40, help="decode step: pairs of steps (penalties off, on)")
    parser.add_argument("--only", choices=("step", "ttft"), help="one of the two measurements")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_model("small-llama", tmp, overrides={"vocab_size": args.vocab}))
        if args.only != "ttft":
            steps = paired_decode_steps(model, args.batch, args.pairs, PENALTIES).summary()
            base = SamplingParams(max_tokens=64, ignore_eos=True, temperature=1.0, seed=0)
            s_off = sampler_seconds(args.batch, args.vocab, base)
            s_on = sampler_seconds(args.batch, args.vocab, replace(base, **PENALTIES))
            print(json.dumps({"vocab": args.vocab, "batch": args.batch, "pairs": args.pairs, **steps,
                              "sampler_s_off": s_off, "sampler_s_penalties": s_on}), flush=True)
        if args.only != "step":
            ttft1, ttft4 = ttft_seconds(model, 1, args.repeats), ttft_seconds(model, 4, args.repeats)
            print(json.dumps({"ttft_s_n1": ttft1, "ttft_s_n4": ttft4, "ttft_ratio": ttft4 / ttft1}), flush=True)


if __name__ == "__main__":
    main()
