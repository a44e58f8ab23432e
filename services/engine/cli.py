"""Engine subcommands: `make-model`, `rank`."""

from __future__ import annotations

import argparse

from services.engine.presets import PRESETS


def _make_model(args: argparse.Namespace) -> int:
    from services.engine.make_model import make_model

    out = make_model(args.preset, args.out, seed=args.seed)
    print(out)
    return 0


def _rank(args: argparse.Namespace) -> int:
    from services.engine.parallel.rank_main import join

    return join(args.rendezvous, args.rank, args.device, args.model or "", args.kvxfer)


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
