"""`distserve decode`: serve one decode instance."""

from __future__ import annotations

import argparse

from services.instance.cli import add_role_command


def _servicer():
    from services.decode.server import add_decode

    return add_decode


def register(subparsers: argparse._SubParsersAction) -> None:
    add_role_command(subparsers, "decode", _servicer)
