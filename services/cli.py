"""The `distserve` command: one subcommand per module, each registering its own parser."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that define `register(subparsers)`; each adds its subcommands with `func` set.
COMMAND_MODULES = (
    "services.engine.cli",
    "services.common.instance_cli",
    "services.router.cli",
    "services.launcher.cli",
    "services.launcher.health_cli",
    "services.kvxfer.cli",
    "services.planner.cli",
    "services.bench.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distserve", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="logging level")
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    from services.common.logs import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, args.log_json)
    sys.exit(args.func(args) or 0)
