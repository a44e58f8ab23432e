"""`distserve generate`: text from a running router, or from the engine in this process with `--local`."""

from __future__ import annotations

import argparse
import json
import os


def _generate(args: argparse.Namespace) -> int:
    from services.common.devices import split_devices
    from services.common.sampling import SamplingParams

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, seed=args.seed, ignore_eos=args.ignore_eos)
    if args.local:
        from services.engine.local import generate_local
        from services.engine.parallel.shard import ParallelConfigError
        from services.engine.presets import resolve_model

        devices = split_devices(args.devices)
        try:
            result = generate_local(resolve_model(args.model), args.device, args.prompt, params, args.tp, args.pp, devices,
                                    args.ep)
        except ParallelConfigError as exc:
            raise SystemExit(str(exc)) from None
    else:
        from services.router.client import generate_remote

        result = generate_remote(args.router, args.prompt, params, stream=not args.json, api_key=args.api_key,
                                 tls_ca=args.tls_ca)
    if args.json:
        print(json.dumps(result))
    elif args.local:
        print(result["text"])
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="generate text: from a running router, or in-process with --local")
    p.add_argument("prompt")
    p.add_argument("--local", action="store_true", help="run the engine in this process, no services")
    p.add_argument("--model", default=None, help="model folder or preset (--local)")
    p.add_argument("--device", default="cpu", help="device for --local")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per stage (--local)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages (--local)")
    p.add_argument("--ep", type=int, default=0, help="MoE: expert groups per stage, dividing --tp (--local; 0: one "
                   "per TP rank)")
    p.add_argument("--devices", default="", help="comma-separated device per rank (--local with --tp/--pp)")
    p.add_argument("--router", default="127.0.0.1:50051", help="router gRPC address")
    p.add_argument("--api-key", default=os.environ.get("DISTSERVE_API_KEY", ""),
                   help="the router's API key (default: $DISTSERVE_API_KEY)")
    p.add_argument("--tls-ca", default="", help="the router serves TLS: check its certificate against this CA file")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object with token_ids and text")
    p.set_defaults(func=_generate)
