"""`distserve prefill`: serve one prefill instance."""

from __future__ import annotations

import argparse

from services.instance.cli import add_role_command


def _servicer():
    from services.prefill.server import add_prefill

    return add_prefill


def register(subparsers: argparse._SubParsersAction) -> None:
    add_role_command(subparsers, "prefill", _servicer)
