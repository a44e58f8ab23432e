"""The operator's credentials `distserve up` makes on first use, next to the deployment secret (0600 files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from services.common.api_keys import add_key, key_names, revoke_key
from services.common.secret import config_dir

ADMIN = "launcher"


class ClientAccess(Protocol):
    """What a stack's client ports are opened with (StackConfig has these fields)."""

    api_key_file: str
    allow_unauthenticated: bool
    tls_cert: str
    tls_key: str
    tls_ca: str


def planner_admin_keys() -> tuple[Path, Path]:
    """(the planner's key file, the file holding the operator's admin key), made on first use."""
    folder = config_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    keys, key = folder / "planner-admin-keys", folder / "planner-admin-key"
    if not key.exists() or ADMIN not in key_names(keys):
        revoke_key(keys, ADMIN)  # a key whose copy was lost cannot be used: replace it
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(add_key(keys, ADMIN) + "\n")
    return keys, key


def router_access(config: ClientAccess) -> list[str]:
    """The router's flags for the stack's API keys and client TLS."""
    flags = ["--api-key-file", config.api_key_file] if config.api_key_file else []
    flags += ["--tls-cert", config.tls_cert, "--tls-key", config.tls_key] if config.tls_cert else []
    return flags + (["--allow-unauthenticated", "true"] if config.allow_unauthenticated else [])


def router_ca(config: ClientAccess) -> bytes | None:
    """The root a client of this stack's router checks its certificate against; None: plaintext."""
    if not config.tls_cert:
        return None
    return Path(config.tls_ca or config.tls_cert).read_bytes()


def planner_access(config: ClientAccess) -> list[str]:
    """The planner's flags: its admin key file (made on first use); and open beyond loopback only when allowed."""
    flags = ["--admin-key-file", str(planner_admin_keys()[0])]
    return flags + (["--allow-unauthenticated"] if config.allow_unauthenticated else [])
