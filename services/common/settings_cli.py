"""Command-line flags generated from a pydantic-settings model, so each option is described once."""

from __future__ import annotations

import argparse
from typing import Literal, get_args, get_origin

from pydantic_settings import BaseSettings


def add_settings_arguments(parser: argparse.ArgumentParser, settings: type[BaseSettings], skip: tuple[str, ...] = ()) -> None:
    for name, field in settings.model_fields.items():
        if name in skip:
            continue
        flag, kind = "--" + name.replace("_", "-"), int if field.annotation is int else float if field.annotation is float else str
        if field.annotation is bool:  # `--flag` alone, or `--flag true|false`
            parser.add_argument(flag, nargs="?", const="true", default=None, help=field.description)
            continue
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        parser.add_argument(flag, type=kind, default=None, choices=choices, help=field.description)


def settings_values(args: argparse.Namespace, settings: type[BaseSettings], skip: tuple[str, ...] = ()) -> dict:
    """The flags given on the command line (unset ones fall back to the environment, then defaults)."""
    return {k: v for k, v in vars(args).items() if k in settings.model_fields and k not in skip and v is not None}


def settings_flags(values: dict) -> list[str]:
    """The command-line flags that carry `values` (as settings_values gives them) to another process."""
    return [arg for name, value in values.items() for arg in ("--" + name.replace("_", "-"), str(value))]
