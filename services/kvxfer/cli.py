"""`distserve kvxfer`: serve the KV-cache transfer service of this host."""

from __future__ import annotations

import argparse
import asyncio

from services.common.settings_cli import add_settings_arguments, settings_values
from services.kvxfer.config import KVXferConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("kvxfer", help="serve the KV-cache transfer service of this host")
    add_settings_arguments(serve, KVXferConfig)  # a bool flag takes true/false, read by pydantic
    serve.set_defaults(func=_serve)


def config_from_args(args: argparse.Namespace) -> KVXferConfig:
    """Flags given on the command line, over DISTSERVE_KVXFER_* variables, over defaults."""
    return KVXferConfig(**settings_values(args, KVXferConfig))


def _serve(args: argparse.Namespace) -> int:
    from services.kvxfer.app import serve

    asyncio.run(serve(config_from_args(args)))
    return 0
