"""`distserve prefill|decode|colocated|chunked`: serve one engine instance."""

from __future__ import annotations

import argparse
import asyncio

from services.common.instance_config import InstanceSettings
from services.common.settings_cli import add_settings_arguments, settings_values

ROLES = ("prefill", "decode", "colocated", "chunked")


def _servicer(role: str):
    if role == "prefill":
        from services.prefill.server import add_prefill

        return add_prefill
    if role == "decode":
        from services.decode.server import add_decode

        return add_decode
    from services.colocated.server import add_colocated

    return add_colocated


def _serve(args: argparse.Namespace) -> int:
    from services.common.instance import run_instance
    from services.engine.cli import resolve_model

    values = settings_values(args, InstanceSettings)
    values["model"] = resolve_model(values.get("model"))
    settings = InstanceSettings(role=args.command, **values)
    asyncio.run(run_instance(settings, _servicer(settings.role)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    for role in ROLES:
        p = subparsers.add_parser(role, help=f"serve one {role} engine instance")
        add_settings_arguments(p, InstanceSettings, skip=("role",))
        p.set_defaults(func=_serve)
