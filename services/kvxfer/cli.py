"""`distserve kvxfer` (serve) and `distserve bench-xfer` (transfer throughput against baselines)."""

from __future__ import annotations

import argparse
import asyncio

from services.kvxfer.config import KVXferConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("kvxfer", help="serve the KV-cache transfer service of this host")
    for name, field in KVXferConfig.model_fields.items():
        serve.add_argument(f"--{name.replace('_', '-')}", type=field.annotation, default=None, help=field.description)
    serve.set_defaults(func=_serve)

    bench = subparsers.add_parser("bench-xfer", help="KV transfer throughput, same host and across hosts")
    bench.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    bench.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    bench.add_argument("--device", default="cpu", help="where the pools live: cpu, or cuda:N (shared with kvxfer by "
                                                        "CUDA IPC; the baselines then run on that GPU too)")
    bench.add_argument("--reshard", action="store_true", help="re-sharding pulls between TP/PP layouts (TP 2 → 1, "
                                                               "1 → 2, PP 2 → 1) beside same-layout pulls of the same bytes")
    bench.set_defaults(func=_bench)


def config_from_args(args: argparse.Namespace) -> KVXferConfig:
    """Flags given on the command line, over DISTSERVE_KVXFER_* variables, over defaults."""
    return KVXferConfig(**{name: getattr(args, name) for name in KVXferConfig.model_fields
                           if getattr(args, name) is not None})


def _serve(args: argparse.Namespace) -> int:
    from services.kvxfer.app import serve

    asyncio.run(serve(config_from_args(args)))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.reshard:
        from services.bench.xfer_reshard import run_reshard_bench

        return run_reshard_bench(as_json=args.json, quick=args.quick)
    from services.kvxfer.bench import run_bench

    return run_bench(as_json=args.json, quick=args.quick, device=args.device)
