"""The command that serves one engine instance; each role's package registers its own (`distserve prefill` ...)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from services.common.settings_cli import add_settings_arguments, settings_values
from services.instance.config import InstanceSettings, Role


def add_role_command(subparsers: argparse._SubParsersAction, role: Role, servicer: Callable[[], object]) -> None:
    """`distserve ROLE [flags]`; `servicer()` imports and returns the role's ServicerFactory (torch loads only then)."""

    def serve(args: argparse.Namespace) -> int:
        from services.engine.presets import resolve_model
        from services.instance.host import run_instance

        values = settings_values(args, InstanceSettings)
        values["model"] = resolve_model(values.get("model"))
        asyncio.run(run_instance(InstanceSettings(role=role, **values), servicer()))
        return 0

    p = subparsers.add_parser(role, help=f"serve one {role} engine instance")
    add_settings_arguments(p, InstanceSettings, skip=("role",))
    p.set_defaults(func=serve)
