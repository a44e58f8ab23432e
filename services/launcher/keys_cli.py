"""`distserve api-key add|revoke|list --file F`: manage a file of hashed API keys (router clients, planner admins)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _keys(args: argparse.Namespace) -> int:
    from services.common.api_keys import add_key, key_names, revoke_key

    path = Path(args.file)
    if args.action == "add":
        print(add_key(path, args.name))  # the only time the key is shown; the file keeps its hash
    elif args.action == "revoke":
        if not revoke_key(path, args.name):
            raise SystemExit(f"no key named {args.name!r} in {path}")
    else:
        print("\n".join(key_names(path)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("api-key", help="add (prints the new key once), revoke or list keys in a key file")
    p.add_argument("action", choices=("add", "revoke", "list"))
    p.add_argument("--file", required=True, help="the key file (made 0600); give it to --api-key-file")
    p.add_argument("--name", default="", help="the key's name (add, revoke)")
    p.set_defaults(func=_keys)
