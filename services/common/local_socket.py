"""Same-host gRPC links over a Unix socket in this user's private directory (pool_files.pool_dir: 0700).

A kvxfer also serves on `<pool dir>/kvxfer-<host>-<port>.sock` (its gRPC address in the name); a client of the
same user on the same host dials that socket instead of host:port. Only this user (and root) can reach a
socket in a 0700 directory of this user, and its bytes never leave the host, so the link has no TLS (which
would cost every call a record's encryption for nothing); the deployment token is still checked on every call.
Where the socket is absent (another host, another container's /dev/shm, another user) a client dials host:port.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from services.common.pool_files import check_pool_dir, ensure_pool_dir, pool_dir


def socket_path(address: str) -> Path:
    """The socket a kvxfer serving gRPC on `address` (host:port) also listens on."""
    host, _, port = address.rpartition(":")
    return pool_dir() / f"kvxfer-{host.strip('[]')}-{port}.sock"


def serving_target(address: str) -> str:
    """The `unix:` target for a server at `address` to bind: the private directory made and checked, a stale
    socket of an earlier process at this address removed (the path name says it is ours)."""
    path = socket_path(address)
    ensure_pool_dir()
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    return f"unix:{path}"


def restrict(address: str) -> None:
    """Make the bound socket 0600 (the directory already keeps others out: defence in depth)."""
    os.chmod(socket_path(address), 0o600)


def remove(address: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        socket_path(address).unlink()


def dial_target(address: str) -> str | None:
    """`unix:<socket>` when a server at `address` serves a socket of this user in the private directory on
    this host, else None (dial host:port)."""
    path = socket_path(address)
    try:
        check_pool_dir()
        st = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        return None
    return f"unix:{path}"
