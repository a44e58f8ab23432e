"""`distserve kvxfer`: serve the KV-cache transfer service of this host."""

from __future__ import annotations

import argparse
import asyncio
import sys

from services.common.settings_cli import add_settings_arguments, settings_values
from services.kvxfer.config import KVXferConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("kvxfer", help="serve the KV-cache transfer service of this host")
    add_settings_arguments(serve, KVXferConfig)  # a bool flag takes true/false, read by pydantic
    serve.set_defaults(func=_serve)


def main(argv: list[str] | None = None) -> None:
    """`python -m services.kvxfer [flags]`: `distserve kvxfer [flags]` without the distserve command above it."""
    from services.common.lifetime import follow_parent
    from services.common.logs import setup_logging

    parser = argparse.ArgumentParser(prog="python -m services.kvxfer", description=__doc__)
    add_settings_arguments(parser, KVXferConfig)
    follow_parent()
    args = parser.parse_args(argv)
    setup_logging()
    sys.exit(_serve(args))


def config_from_args(args: argparse.Namespace) -> KVXferConfig:
    """Flags given on the command line, over DISTSERVE_KVXFER_* variables, over defaults."""
    return KVXferConfig(**settings_values(args, KVXferConfig))


def _serve(args: argparse.Namespace) -> int:
    from services.kvxfer.app import serve

    asyncio.run(serve(config_from_args(args)))
    return 0
