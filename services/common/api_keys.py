"""API keys of a front door (the router's clients, the planner's operators): a file of SHA-256 hashes.

One key a line, `<name> sha256:<hex>`; `#` starts a comment. A key is `ds-` and 32 random bytes, so a plain
hash is enough to store it (nothing to guess). Revoke a key by deleting its line: the file is re-read when
it changes. Presented keys are compared with every stored hash in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from pathlib import Path

RELOAD_S = 1.0  # how often the file's modification time is looked at


def new_key() -> str:
    return "ds-" + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def add_key(path: Path, name: str) -> str:
    """Appends a new key's hash under `name` to the file (made 0600); returns the key, shown once."""
    if not name or any(c.isspace() for c in name):
        raise ValueError("key name: one word")
    if name in _parse(path):
        raise ValueError(f"key name {name!r} is already in {path}")
    key = new_key()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(f"{name} {key_hash(key)}\n")
    return key


def revoke_key(path: Path, name: str) -> bool:
    """Removes `name`'s line; False if there was none."""
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    kept = [line for line in lines if line.split()[:1] != [name]]
    if len(kept) == len(lines):
        return False
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(kept)
    tmp.replace(path)
    return True


def key_names(path: Path) -> list[str]:
    return list(_parse(path))


def _parse(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    keys = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2 or not fields[1].startswith("sha256:") or len(fields[1]) != 7 + 64:
            raise ValueError(f"{path}:{number}: expected '<name> sha256:<64 hex digits>'")
        keys[fields[0]] = fields[1]
    return keys


class ApiKeys:
    """The keys a front door accepts: a key file (re-read when it changes) and/or plain keys given at start."""

    def __init__(self, path: str = "", plain: tuple[str, ...] = ()) -> None:
        self._path = Path(path) if path else None
        self._plain = {f"key{i}": key_hash(k) for i, k in enumerate(plain) if k}
        self._hashes: dict[str, str] = {}
        self._version: tuple[int, ...] = ()
        self._checked = 0.0
        self._reload()

    @property
    def enabled(self) -> bool:
        return self._path is not None or bool(self._plain)

    def _reload(self) -> None:
        self._checked = time.monotonic()
        if self._path is None:
            self._hashes = dict(self._plain)
            return
        st = self._path.stat() if self._path.exists() else None
        version = (st.st_ino, st.st_mtime_ns, st.st_size) if st else (0,)
        if version != self._version:
            self._hashes = {**_parse(self._path), **self._plain}
            self._version = version

    def name_of(self, key: str) -> str | None:
        """The name of `key` if it is a current key; None otherwise."""
        found = self._match(key)
        return found and found[0]

    def _match(self, key: str) -> tuple[str, str] | None:
        """The name and stored hash of `key` if it is a current key."""
        if time.monotonic() - self._checked > RELOAD_S:
            self._reload()
        presented = key_hash(key)
        found = None
        for name, stored in self._hashes.items():  # no early exit: the time does not tell which matched
            if hmac.compare_digest(stored, presented):
                found = name, stored
        return found

    def tenant(self, authorization: str | None) -> str:
        """The identity of the key an `Authorization: Bearer <key>` value carries: a digest of the key itself, never
        its name, so a key re-issued under an old name (or plain keys given in another order) is another tenant;
        "" without keys (one tenant)."""
        found = self._bearer(authorization) if self.enabled else None
        return hashlib.sha256(f"tenant:{found[1]}".encode()).hexdigest()[:32] if found else ""

    def allows_bearer(self, authorization: str | None) -> bool:
        """Whether an `Authorization: Bearer <key>` value carries a current key (always, with no keys set)."""
        return not self.enabled or self._bearer(authorization) is not None

    def _bearer(self, authorization: str | None) -> tuple[str, str] | None:
        scheme, _, key = (authorization or "").partition(" ")
        return self._match(key.strip()) if scheme.lower() == "bearer" else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, keys: ApiKeys, allow_open: bool, what: str) -> None:
    """Refuses to serve `what` beyond loopback without keys unless explicitly allowed."""
    if not keys.enabled and not is_loopback(host) and not allow_open:
        raise SystemExit(f"{what}: binding {host} without API keys would serve anyone who reaches it; "
                         "give an API key file, bind 127.0.0.1, or pass --allow-unauthenticated")
