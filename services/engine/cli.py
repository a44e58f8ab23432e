"""Engine subcommands: `make-model`, `bench-engine`."""

from __future__ import annotations

import argparse

from services.engine.presets import PRESETS, resolve_model


def _make_model(args: argparse.Namespace) -> int:
    from services.engine.make_model import make_model

    out = make_model(args.preset, args.out, seed=args.seed)
    print(out)
    return 0


def _rank(args: argparse.Namespace) -> int:
    from services.engine.parallel.rank_main import join

    return join(args.rendezvous, args.rank, args.device, args.model or "", args.kvxfer)


def _bench_engine(args: argparse.Namespace) -> int:
    if args.layouts:
        from services.engine.parallel.bench import parse_layouts, run_bench_layouts

        return run_bench_layouts(resolve_model(args.model), parse_layouts(args.layouts), args.json)
    from services.engine.bench import run_bench_engine

    return run_bench_engine(resolve_model(args.model), args.device, args.json)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("make-model", help="write a seeded random-weight checkpoint in the Hugging Face format")
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_make_model)

    p = subparsers.add_parser("rank", help="serve one rank (1..N-1) of a TP/PP instance whose rank 0 was started "
                                           "with --rendezvous (one process per device, e.g. a compose service each)")
    p.add_argument("--rendezvous", required=True, help="host:port of the instance's rank 0")
    p.add_argument("--rank", type=int, required=True, help="this rank's number: pp_rank x TP + tp_rank")
    p.add_argument("--device", default="cpu", help="this rank's device as this host numbers it")
    p.add_argument("--model", default=None, help="model folder here (default: rank 0's path)")
    p.add_argument("--kvxfer", default="", help="this host's kvxfer (host:port) where it is not rank 0's: the "
                                                "rank's KV pool is registered and leased there")
    p.set_defaults(func=_rank)

    p = subparsers.add_parser("bench-engine", help="prefill and decode throughput beside the core's matmul and memcpy rates")
    p.add_argument("--model", default=None, help="model folder or preset")
    p.add_argument("--device", default="cpu:0")
    p.add_argument("--json", action="store_true")
    p.add_argument("--layouts", default="", help="TPxPP instances to time instead, e.g. 1x1,2x1,1x2: prefill and "
                                                 "decode step wall times, a core per rank")
    p.set_defaults(func=_bench_engine)
