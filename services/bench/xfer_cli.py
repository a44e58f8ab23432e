"""`distserve bench-xfer`: KV transfer throughput, same host and across hosts, against the raw baselines."""

from __future__ import annotations

import argparse


def _bench_xfer(args: argparse.Namespace) -> int:
    from services.bench.xfer import run_bench

    return run_bench(as_json=args.json, quick=args.quick, device=args.device)


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench-xfer", help="KV transfer throughput, same host and across hosts")
    bench.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    bench.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    bench.add_argument("--device", default="cpu", help="where the pools live: cpu, or cuda:N (shared with kvxfer by "
                                                        "CUDA IPC; the baselines then run on that GPU too)")
    bench.set_defaults(func=_bench_xfer)
