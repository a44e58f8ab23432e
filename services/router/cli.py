"""`distserve router`: serve the router (gRPC and OpenAI HTTP)."""

from __future__ import annotations

import argparse
import asyncio

from services.common.settings_cli import add_settings_arguments, settings_values
from services.router.config import RouterSettings


def _serve(args: argparse.Namespace) -> int:
    from services.engine.cli import resolve_model
    from services.router.main import serve_router

    values = settings_values(args, RouterSettings)
    values["model"] = resolve_model(values.get("model"))
    asyncio.run(serve_router(RouterSettings(**values)))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from services.engine.cli import resolve_model
    from services.router.bench import run_bench_router

    return run_bench_router(resolve_model(args.model), args.requests, args.tokens, args.streams, args.json)


def register(subparsers: argparse._SubParsersAction) -> None:
    b = subparsers.add_parser("bench-router", help="per-token latency the router adds, and tokens/s it relays")
    b.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    b.add_argument("--requests", type=int, default=10)
    b.add_argument("--tokens", type=int, default=128)
    b.add_argument("--streams", type=int, default=16, help="concurrent streams for the throughput figure")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench)

    p = subparsers.add_parser("router", help="serve the router: gRPC distserve.v1.Router and OpenAI-compatible HTTP")
    add_settings_arguments(p, RouterSettings)
    p.set_defaults(func=_serve)
