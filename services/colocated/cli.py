"""`distserve colocated` and `distserve chunked`: serve one instance that runs both phases."""

from __future__ import annotations

import argparse

from services.instance.cli import add_role_command


def _servicer():
    from services.colocated.server import add_colocated

    return add_colocated


def register(subparsers: argparse._SubParsersAction) -> None:
    add_role_command(subparsers, "colocated", _servicer)
    add_role_command(subparsers, "chunked", _servicer)
