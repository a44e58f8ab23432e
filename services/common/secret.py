"""The deployment secret: 32 random bytes in a 0600 file that every process of one deployment reads.

`distserve up` makes it on first use under the user's config directory and hands its path to the
processes it starts in DISTSERVE_SECRET_FILE; compose files mount it as a secret at the same variable.
A server started without the variable runs with internal authentication off (and says so); a client
(a tool, a benchmark, a test) without it uses the user's default secret when there is one.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

SECRET_ENV = "DISTSERVE_SECRET_FILE"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "distserve"


def ensure_secret(path: Path | None = None) -> Path:
    """The secret file at `path` (default: <config dir>/secret), made 0600 in a 0700 directory if missing."""
    path = path or config_dir() / "secret"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        # Written under a private name, then linked: a concurrent first use sees the whole file or none.
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    read_secret(path)  # refuse a secret others can read now, not in every child
    return path


def read_secret(path: Path) -> bytes:
    """The secret in `path`; ValueError if it is not a regular file of this user that only this user can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"deployment secret {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        # root may own it: a compose secret is mounted with its owner on the host
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o077:
            raise ValueError(f"deployment secret {path} must be a regular file of this user, mode 0600")
        secret = f.read().strip()
    if len(secret) < 32:
        raise ValueError(f"deployment secret {path} is too short (at least 32 bytes)")
    return secret


def deployment_secret() -> bytes | None:
    """The secret named by DISTSERVE_SECRET_FILE, or None when the variable is unset (authentication off)."""
    path = os.environ.get(SECRET_ENV)
    return read_secret(Path(path)) if path else None


def client_secret() -> bytes | None:
    """What a caller presents: DISTSERVE_SECRET_FILE's secret, else the user's default one if made, else none."""
    if SECRET_ENV in os.environ:
        return deployment_secret()
    default = config_dir() / "secret"
    return read_secret(default) if default.exists() else None
