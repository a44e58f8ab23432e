"""`python -m benchmarks.prefill_parts`: where a prefill's time goes on each device (GEMM, attention, element-wise
ops, K/V writes, the rest of the step), to see which part keeps several threads from scaling.

Each device is measured in a process of its own (`cpu:0`, `cpu:0-1`: the instance's threads); a 512-token prompt is
prefilled `--runs` times under torch.profiler and the fastest run kept (a shared host's bursts left out). A part is
the self CPU time of its ops on the step's thread, which is wall time there (the other threads work inside the ops);
`outside ops` is the step's wall time not inside any op (Python, scheduling, sampling, the profiler's own cost).

    python3 -m benchmarks.prefill_parts [--model small-llama] [--devices cpu:0,cpu:0-1] [--runs 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import time
from collections import Counter

from benchmarks.engine import PREFILL_TOKENS, _engine, _prompt
from services.common.devices import split_devices
from services.common.sampling import SamplingParams
from services.engine.device import setup_device
from services.engine.presets import resolve_model

PARTS = {"aten::mm": "gemm", "aten::addmm": "gemm", "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
         "aten::_index_put_impl_": "kv write"}
ELEMENTWISE = {"aten::mul", "aten::add", "aten::cat", "aten::neg", "aten::silu", "aten::pow", "aten::sum",
               "aten::mean", "aten::div_", "aten::rsqrt", "aten::add_", "aten::copy_", "aten::_to_copy",
               "aten::_fused_rms_norm", "aten::cos", "aten::sin"}


def measure(model_dir: str, device: str, runs: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    engine = _engine(model_dir, device, setup_device(device))
    rng, vocab = random.Random(0), engine.model_config.vocab_size

    def one() -> None:
        engine.add_request(f"p-{rng.getrandbits(32)}", _prompt(rng, PREFILL_TOKENS, vocab), SamplingParams(max_tokens=1))
        engine.step()

    try:
        one()
        best: tuple[float, Counter] | None = None
        for _ in range(runs):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                began = time.perf_counter()
                one()
                wall = time.perf_counter() - began
            if best is None or wall < best[0]:
                parts: Counter = Counter()
                for e in prof.key_averages():
                    parts[PARTS.get(e.key) or ("elementwise" if e.key in ELEMENTWISE else "other ops")] += \
                        e.self_cpu_time_total / 1e3
                best = (wall, parts)
    finally:
        engine.close()
    assert best is not None
    wall_ms, parts = best[0] * 1e3, best[1]
    return {"device": device, "prefill_ms": round(wall_ms, 1),
            "parts_ms": {**{k: round(v, 1) for k, v in parts.most_common()},
                         "outside ops": round(wall_ms - sum(parts.values()), 1)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small-llama")
    parser.add_argument("--devices", default="cpu:0,cpu:0-1")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model, context = resolve_model(args.model), multiprocessing.get_context("spawn")
    rows = []
    for device in split_devices(args.devices):  # a process each: a device pins the process and sizes its pool
        with context.Pool(1) as pool:
            rows.append(pool.apply(measure, (model, device, args.runs)))
    if args.json:
        print(json.dumps(rows))
        return 0
    first = rows[0]["parts_ms"]
    for r in rows:
        print(f"{args.model} prefill {PREFILL_TOKENS} on {r['device']}: {r['prefill_ms']:.1f} ms (fastest of {args.runs}, "
              "profiled)")
        for part, ms in r["parts_ms"].items():
            print(f"  {part:12} {ms:8.1f} ms" + (f"  ({first[part] / ms:.2f}x the first)" if r is not rows[0]
                                                   and ms > 0 and part in first else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
