"""Where a disaggregated request's first inter-token gap (its hand-off to the decode instance) goes under load.

Starts a disaggregated stack on cpu:0 + cpu:1 (the bench's), sends the bench's chatbot requests (seed 0) at each
rate given, and splits every request's first → second token gap at the client by the router's stamps:
  to decode   client's first token → decode request queued at the decode instance
  reserve     → its KV blocks reserved
  pull        → K/V pulled (kvxfer)
  admit       → the decode step that first carries it starts (waits for the step under way to end)
  step+relay  → the second token at the client (that step, then decode → router → client)

It also prints the attainment of the TTFT and TPOT objectives (`--ttft`, `--tpot`, seconds), and with `--each`
every request's split (prompt and output tokens, then the parts in ms).

    python3 scripts/handoff_probe.py [--model DIR] [--ttft 0.975] [--tpot 0.0152] [--each] RATE [RATE ...]
"""

from __future__ import annotations

import argparse
import statistics

from services.bench.loadgen import RequestResult
from services.bench.runner import Bench, BenchConfig, run_requests, serving, warm_up
from services.engine.presets import resolve_model

PARTS = {"to decode": ("first", "decode_queued"), "reserve": ("decode_queued", "xfer_start"),
         "pull": ("xfer_start", "xfer_end"), "admit": ("xfer_end", "decode_start"),
         "step+relay": ("decode_start", "second")}


def _split(result: RequestResult) -> dict[str, float]:
    times = {"first": result.first, "second": result.second, **result.lifetime.to_record()}
    return {part: times[b] - times[a] for part, (a, b) in PARTS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rates", type=float, nargs="+")
    parser.add_argument("--model", default="small-llama")
    parser.add_argument("--ttft", type=float, default=0.975)
    parser.add_argument("--tpot", type=float, default=0.0152)
    parser.add_argument("--each", action="store_true", help="print every request's split")
    args = parser.parse_args()
    cfg = BenchConfig(model=resolve_model(args.model), num_requests=60, ttft=args.ttft, tpot=args.tpot)
    bench = Bench(cfg)
    sample = bench.samples["chatbot"]
    with serving(cfg, "disagg") as served:
        warm_up(cfg, served, sample, bench.kv_bytes, None)
        for rate in args.rates:
            results = run_requests(served, sample.requests(rate, f"probe-{rate}"), None, "")
            split = {i: _split(r) for i, r in enumerate(results) if r.first_gap is not None and r.lifetime is not None}
            splits = list(split.values())
            gaps = sorted(1000 * r.first_gap for r in results if r.first_gap is not None)
            met = sum(r.ok and r.ttft <= args.ttft and r.tpot <= args.tpot for r in results) / len(results)
            print(f"{rate} req/s, {len(splits)} requests: first gap median {statistics.median(gaps):.1f} ms, "
                  f"p90 {gaps[int(0.9 * len(gaps))]:.1f} ms; attainment {100 * met:.1f}%")
            if args.each:
                for i, parts in split.items():
                    text = "  ".join(f"{k} {1000 * v:5.1f}" for k, v in parts.items())
                    print(f"  #{i:<3d} prompt {results[i].prompt_tokens:4d} output {results[i].output_tokens:4d}  {text}")
            for part in PARTS:
                values = sorted(1000 * s[part] for s in splits)
                print(f"  {part:11s} median {statistics.median(values):5.1f}  p90 {values[int(0.9 * len(values))]:5.1f}"
                      f"  mean {statistics.mean(values):5.1f} ms")


if __name__ == "__main__":
    main()
