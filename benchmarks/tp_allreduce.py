"""`python -m benchmarks.tp_allreduce`: what share of a TP 2 decode step the all-reduces take (CPU, one core a rank).

Rank 0 runs in this process, so its all-reduces are timed where they are called (`ShmAllReduce.all_reduce`, wall
time: the copy and the wait for rank 1 both); the step is timed around `engine.step()`. Figures are the means over
the fastest quarter of the steps, so bursts of other work on a shared host count as little as they can.

    python3 -m benchmarks.tp_allreduce [--model small-llama] [--batch 1] [--steps 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from benchmarks.engine import DECODE_CONTEXT, _prompt
from services.common.sampling import SamplingParams
from services.engine.device import setup_device
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.parallel.shm_allreduce import ShmAllReduce
from services.engine.presets import resolve_model


def measure(model_dir: str, batch: int, steps: int) -> dict:
    spent = [0.0, 0]
    plain = ShmAllReduce.all_reduce

    def timed(self, t):  # rank 0's all-reduce, timed where the layer calls it
        began = time.perf_counter()
        out = plain(self, t)
        spent[0] += time.perf_counter() - began
        spent[1] += 1
        return out

    setup_device("cpu:0")
    blocks = batch * (DECODE_CONTEXT + steps + 16) // 16 + 16
    engine = LLMEngine(EngineConfig(model_dir, block_size=16, num_blocks=blocks, max_batch_tokens=DECODE_CONTEXT * batch,
                                    max_num_seqs=batch, tp=2, pp=1, devices=("cpu:0", "cpu:1")))
    ShmAllReduce.all_reduce = timed  # type: ignore[method-assign]
    rng, rows = random.Random(0), []
    try:
        for i in range(batch):
            engine.add_request(f"decode-{i}", _prompt(rng, DECODE_CONTEXT, engine.model_config.vocab_size),
                               SamplingParams(max_tokens=steps + 16, ignore_eos=True))
        for _ in range(8):  # the prompts, then warm decode steps
            engine.step()
        for _ in range(steps):
            spent[:] = [0.0, 0]
            began = time.perf_counter()
            engine.step()
            rows.append((time.perf_counter() - began, spent[0], spent[1]))
    finally:
        ShmAllReduce.all_reduce = plain  # type: ignore[method-assign]
        engine.close()
    rows.sort()
    fast = rows[:max(1, len(rows) // 4)]
    step, reduce = (sum(r[i] for r in fast) / len(fast) for i in (0, 1))
    return {"model": model_dir, "batch": batch, "steps": steps, "load_1min": round(os.getloadavg()[0], 2),
            "step_ms": round(step * 1e3, 3), "median_step_ms": round(rows[len(rows) // 2][0] * 1e3, 3),
            "all_reduces": fast[0][2], "all_reduce_ms": round(reduce * 1e3, 3),
            "per_call_us": round(reduce / max(fast[0][2], 1) * 1e6, 1), "share": round(reduce / step, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small-llama")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = measure(resolve_model(args.model), args.batch, args.steps)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"{args.model} TP 2 decode, batch {r['batch']} (fastest quarter of {r['steps']} steps, load {r['load_1min']}): "
          f"step {r['step_ms']:.2f} ms (median {r['median_step_ms']:.2f}), {r['all_reduces']} all-reduces "
          f"{r['all_reduce_ms']:.2f} ms = {100 * r['share']:.1f}% of the step, {r['per_call_us']:.1f} us each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
