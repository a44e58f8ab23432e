"""Where a disaggregated stack's host services should run: an A/B of placements, alternating in one stack.

Starts a disaggregated stack on cpu:0 (prefill) + cpu:1 (decode) with its services unpinned, warms it up, then
for each round runs the bench's chatbot requests (seed 0) at RATE once per arm, moving the named services to core
0 (the prefill core) before each run and back to both cores after. An arm is `+`-joined services out of router,
redis, kvxfer, or `none`. Per run it prints the attainment of TTFT and TPOT (`--ttft`, `--tpot`, seconds), their
percentiles, the first inter-token gap, and the CPU each process spent per request.

    python3 scripts/service_cores_ab.py [--requests 150] [--rounds 3] [--arms none,router+redis,router+redis+kvxfer] RATE
"""

from __future__ import annotations

import argparse
import os

from procs import stack_pids, thread_cpu  # scripts/procs.py

from services.bench.results import summarize
from services.bench.runner import Bench, BenchConfig, run_requests, serving, warm_up
from services.engine.presets import resolve_model
from services.launcher.cores import pin_process


def _cpu_seconds(pid: int) -> float:
    """User + system seconds of every thread of a process."""
    return sum(thread_cpu(pid).values())


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rate", type=float)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default="none,router+redis,router+redis+kvxfer")
    parser.add_argument("--ttft", type=float, default=2.5)
    parser.add_argument("--tpot", type=float, default=0.0152)
    parser.add_argument("--model", default="small-llama")
    args = parser.parse_args()
    arms = [[] if arm == "none" else arm.split("+") for arm in args.arms.split(",")]
    cfg = BenchConfig(model=resolve_model(args.model), num_requests=args.requests, ttft=args.ttft, tpot=args.tpot,
                      service_cores=())
    bench = Bench(cfg)
    sample = bench.samples["chatbot"]
    with serving(cfg, "disagg") as served:
        warm_up(cfg, served, sample, bench.kv_bytes, None)
        pids = stack_pids(served.redis_url.rsplit(":", 1)[1].split("/")[0])
        everywhere = tuple(sorted(os.sched_getaffinity(0)))
        for round_ in range(args.rounds):
            for arm in arms:
                for role in ("router", "redis", "kvxfer"):
                    pin_process(pids[role], (0,) if role in arm else everywhere)
                before = {role: _cpu_seconds(pid) for role, pid in pids.items()}
                results = run_requests(served, sample.requests(args.rate, f"ab-{round_}-{'+'.join(arm)}"), None, "")
                cpu = {role: 1000 * (_cpu_seconds(pid) - before[role]) / len(results) for role, pid in pids.items()}
                point = summarize(args.rate, results, bench.slos["chatbot"], 0.0)
                tpot = [1000 * r.tpot for r in results if r.ok and r.output_tokens > 1]  # no one-token outputs
                print(f"round {round_} {'+'.join(arm) or 'none':22s} attainment {point.attainment:.3f}  TPOT p50/p90 "
                      f"{_pct(tpot, .5):.1f}/{_pct(tpot, .9):.1f} ms  first gap p50 {1000 * point.first_gap['p50']:.1f} ms  "
                      f"TTFT p50/p90 {point.ttft['p50']:.3f}/{point.ttft['p90']:.3f} s  CPU ms/request "
                      + " ".join(f"{role} {ms:.1f}" for role, ms in cpu.items()), flush=True)


if __name__ == "__main__":
    main()
