"""The `distserve` command: one subcommand per module, each registering its own parser."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# Modules that define `register(subparsers)`; each adds its subcommands with `func` set.
COMMAND_MODULES = (
    "services.engine.cli",
    "services.generate_cli",
    "services.prefill.cli",
    "services.decode.cli",
    "services.colocated.cli",
    "services.router.cli",
    "services.mocker.cli",
    "services.launcher.cli",
    "services.launcher.health_cli",
    "services.launcher.keys_cli",
    "services.deploy.redis_acl_cli",
    "services.kvxfer.cli",
    "services.planner_cli",
    "services.bench.cli",
    "services.bench.xfer_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distserve", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="logging level")
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    parser.add_argument("--cores", default="", help="run this process on these CPU cores only (comma-separated)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    from services.common.lifetime import follow_parent
    from services.common.logs import setup_logging

    follow_parent()
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_json)
    if args.cores:  # before the command starts any thread, so that they all inherit it
        try:
            cores = {int(core) for core in args.cores.split(",")}
        except ValueError as exc:
            parser.error(f"--cores {args.cores}: {exc}")
        allowed = cores & os.sched_getaffinity(0)  # as `--device cpu:N`: a core this process may not use is skipped
        if allowed:
            os.sched_setaffinity(0, allowed)
        else:
            logging.getLogger(__name__).warning("--cores %s: none of them is available here; not pinned", args.cores)
    sys.exit(args.func(args) or 0)
