"""`distserve router`: serve the router (gRPC and OpenAI HTTP)."""

from __future__ import annotations

import argparse
import asyncio

from services.common.settings_cli import add_settings_arguments, settings_values
from services.router.config import RouterSettings


def _serve(args: argparse.Namespace) -> int:
    from services.engine.presets import resolve_model
    from services.router.main import serve_router

    values = settings_values(args, RouterSettings)
    values["model"] = resolve_model(values.get("model"))
    asyncio.run(serve_router(RouterSettings(**values)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("router", help="serve the router: gRPC distserve.v1.Router and OpenAI-compatible HTTP")
    add_settings_arguments(p, RouterSettings)
    p.set_defaults(func=_serve)
