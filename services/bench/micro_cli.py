"""`distserve bench-xfer` (KV transfer throughput against baselines), `distserve bench-router` (what the
router adds per streamed token) and `distserve bench-security` (what authentication and TLS cost)."""

from __future__ import annotations

import argparse


def _bench_xfer(args: argparse.Namespace) -> int:
    if args.reshard:
        from services.bench.xfer_reshard import run_reshard_bench

        return run_reshard_bench(as_json=args.json, quick=args.quick)
    if args.encrypt:
        from services.bench.xfer_encrypt import run_encrypt_bench

        return run_encrypt_bench(as_json=args.json, quick=args.quick)
    from services.bench.xfer import run_bench

    return run_bench(as_json=args.json, quick=args.quick, device=args.device)


def _bench_router(args: argparse.Namespace) -> int:
    from services.bench.router import run_bench_router
    from services.engine.presets import resolve_model

    return run_bench_router(resolve_model(args.model), args.requests, args.tokens, args.streams, args.json)


def _bench_security(args: argparse.Namespace) -> int:
    if args.rpc_parts:
        from services.bench.rpc_parts import run_rpc_parts

        return run_rpc_parts(args.rounds, args.rpc_calls)
    from services.bench.security_cost import run_security_bench
    from services.engine.presets import resolve_model

    return run_security_bench(resolve_model(args.model), args.rounds, args.tokens, args.rpc_calls, args.device,
                              tuple(d for d in args.stack_devices.split(",") if d))


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench-xfer", help="KV transfer throughput, same host and across hosts")
    bench.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    bench.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    bench.add_argument("--device", default="cpu", help="where the pools live: cpu, or cuda:N (shared with kvxfer by "
                                                        "CUDA IPC; the baselines then run on that GPU too)")
    bench.add_argument("--reshard", action="store_true", help="re-sharding pulls between TP/PP layouts (TP 2 → 1, "
                                                               "1 → 2, PP 2 → 1) beside same-layout pulls of the same bytes")
    bench.add_argument("--encrypt", action="store_true", help="cross-host pulls with KV encryption (--encrypt-kv) "
                                                               "off and on, in interleaved rounds, and on/off")
    bench.set_defaults(func=_bench_xfer)

    b = subparsers.add_parser("bench-router", help="per-token latency the router adds, and tokens/s it relays")
    b.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    b.add_argument("--requests", type=int, default=10)
    b.add_argument("--tokens", type=int, default=128)
    b.add_argument("--streams", type=int, default=16, help="concurrent streams for the throughput figure")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench_router)

    s = subparsers.add_parser("bench-security", help="router per-token latency, same- and cross-host pulls and one "
                              "kvxfer RPC with authentication and TLS off vs on, interleaved in one run")
    s.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    s.add_argument("--rounds", type=int, default=16, help="rounds; each measures both sides, the first alternating "
                   "(more rounds: a narrower interval)")
    s.add_argument("--tokens", type=int, default=32, help="tokens of the router's request in each round")
    s.add_argument("--rpc-calls", type=int, default=200, help="unary kvxfer RPCs per round and side")
    s.add_argument("--device", default="cpu", help="where the pulls' pools live: cpu, or cuda:N (CUDA IPC)")
    s.add_argument("--stack-devices", default="cpu:0,cpu:1", help="the prefill's and the decode's device, in each stack")
    s.add_argument("--rpc-parts", action="store_true", help="only unary kvxfer RPCs, one security part at a time "
                   "(token sent, token checked, mutual TLS; same-host socket and TCP; a same-host pull with the "
                   "token as metadata or in the body): no stack, no model")
    s.set_defaults(func=_bench_security)
