"""`distserve bench-xfer` (KV transfer throughput against baselines) and `distserve bench-router` (what the
router adds per streamed token)."""

from __future__ import annotations

import argparse


def _bench_xfer(args: argparse.Namespace) -> int:
    if args.reshard:
        from services.bench.xfer_reshard import run_reshard_bench

        return run_reshard_bench(as_json=args.json, quick=args.quick)
    from services.bench.xfer import run_bench

    if args.auth_compare:
        from services.bench.auth_cost import compare_xfer

        return compare_xfer(args.quick, args.device)
    return run_bench(as_json=args.json, quick=args.quick, device=args.device)


def _bench_router(args: argparse.Namespace) -> int:
    from services.bench.router import run_bench_router
    from services.engine.presets import resolve_model

    if args.auth_compare:
        from services.bench.auth_cost import compare_router

        return compare_router(resolve_model(args.model), args.requests, args.tokens, args.streams)
    return run_bench_router(resolve_model(args.model), args.requests, args.tokens, args.streams, args.json)


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench-xfer", help="KV transfer throughput, same host and across hosts")
    bench.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    bench.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    bench.add_argument("--device", default="cpu", help="where the pools live: cpu, or cuda:N (shared with kvxfer by "
                                                        "CUDA IPC; the baselines then run on that GPU too)")
    bench.add_argument("--auth-compare", action="store_true", help="run with the deployment's authentication off, "
                       "then on, and compare")
    bench.add_argument("--reshard", action="store_true", help="re-sharding pulls between TP/PP layouts (TP 2 → 1, "
                                                               "1 → 2, PP 2 → 1) beside same-layout pulls of the same bytes")
    bench.set_defaults(func=_bench_xfer)

    b = subparsers.add_parser("bench-router", help="per-token latency the router adds, and tokens/s it relays")
    b.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    b.add_argument("--requests", type=int, default=10)
    b.add_argument("--tokens", type=int, default=128)
    b.add_argument("--streams", type=int, default=16, help="concurrent streams for the throughput figure")
    b.add_argument("--json", action="store_true")
    b.add_argument("--auth-compare", action="store_true", help="a stack without, then one with, authentication")
    b.set_defaults(func=_bench_router)
