"""Where a disaggregated stack's prefill time goes around its knee: the prefill engine's CPU against its steps.

Starts a disaggregated stack (cpu:0 prefill with the router and Redis, cpu:1 decode), warms it up, then runs the
bench's chatbot requests (seed 0) once at each RATE (repeat a rate to see how one point varies). Per run: the
attainment (`--ttft`, `--tpot` seconds), the prefill steps' wall seconds (from the instance's step log) against the
CPU seconds of the prefill process's busiest thread (the engine), both per prompt token, and the CPU each process
spent per request. A step's wall time that its engine did not spend on the CPU went to the other processes on
the core (or to waits).

    python3 scripts/knee_cpu.py [--ttft 2.5 --tpot 0.0152] 3.6 4.5 4.95 5.4 5.4 4.95
"""

from __future__ import annotations

import argparse
import time

from procs import stack_pids, thread_cpu  # scripts/procs.py

from services.bench.results import summarize
from services.bench.runner import Bench, BenchConfig, run_requests, serving, warm_up
from services.bench.served import served_steps
from services.engine.presets import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rates", type=float, nargs="+")
    parser.add_argument("--ttft", type=float, default=2.5)
    parser.add_argument("--tpot", type=float, default=0.0152)
    args = parser.parse_args()
    cfg = BenchConfig(model=resolve_model("small-llama"), num_requests=200, window_s=150, ttft=args.ttft,
                      tpot=args.tpot)
    bench = Bench(cfg)
    with serving(cfg, "disagg") as served:
        warm_up(cfg, served, bench.samples["chatbot"], bench.kv_bytes, None)
        pids = stack_pids(served.redis_url.rsplit(":", 1)[1].split("/")[0])
        for i, rate in enumerate(args.rates):
            before = {role: thread_cpu(pid) for role, pid in pids.items()}
            began, start = time.time(), time.monotonic()
            results = run_requests(served, bench.sample_at("chatbot")(rate).requests(rate, f"knee-{i}"), None, "")
            wall = time.monotonic() - start
            cpu = {role: {t: s - before[role].get(t, 0.0) for t, s in thread_cpu(pid).items()} for role, pid in pids.items()}
            steps = [s for s in served_steps(served.redis_url, began) if s.kind == "prefill"]
            step_s, tokens = sum(s.seconds for s in steps), sum(s.tokens for s in steps)
            engine = max(cpu["prefill"].values())
            point = summarize(rate, results, bench.slos["chatbot"], 0.0)
            per_request = " ".join(f"{role} {1e3 * sum(cpu[role].values()) / len(results):.1f}" for role in pids)
            print(f"{rate:5.2f} req/s: attainment {point.attainment:.3f} (TTFT {point.ttft_attainment:.3f}) | prefill "
                  f"steps {step_s / wall:.2f} of the wall time, engine CPU {engine / step_s:.3f} of the steps' | per "
                  f"prompt token: step {step_s / tokens * 1e6:.0f} us, engine CPU {engine / tokens * 1e6:.0f} us | CPU "
                  f"ms per request: {per_request}", flush=True)


if __name__ == "__main__":
    main()
