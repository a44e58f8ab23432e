"""`distserve kvxfer`: serve the KV-cache transfer service of this host."""

from __future__ import annotations

import argparse
import asyncio

from services.kvxfer.config import KVXferConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("kvxfer", help="serve the KV-cache transfer service of this host")
    for name, field in KVXferConfig.model_fields.items():
        serve.add_argument(f"--{name.replace('_', '-')}", type=field.annotation, default=None, help=field.description)
    serve.set_defaults(func=_serve)


def config_from_args(args: argparse.Namespace) -> KVXferConfig:
    """Flags given on the command line, over DISTSERVE_KVXFER_* variables, over defaults."""
    return KVXferConfig(**{name: getattr(args, name) for name in KVXferConfig.model_fields
                           if getattr(args, name) is not None})


def _serve(args: argparse.Namespace) -> int:
    from services.kvxfer.app import serve

    asyncio.run(serve(config_from_args(args)))
    return 0
