"""Redis's password for a deployment: derived from the deployment secret, so it never travels on a command line.

The launcher's embedded redis-server admits only the ACL user `distserve` (the default user is off), with
the password HMAC(secret, "redis"). URLs name the user without a password (redis://distserve@host:port/0);
every process that holds the secret fills the password in with `resolve_url` before it connects.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from services.common.auth import token
from services.common.secret import client_secret

USER = "distserve"


def redis_password(secret: bytes) -> str:
    return token(secret, "redis")


def resolve_url(url: str) -> str:
    """`url` with the deployment's password when it names the deployment's user without one; else unchanged."""
    parts = urlsplit(url)
    if parts.username != USER or parts.password is not None:
        return url
    secret = client_secret()
    if secret is None:
        raise ValueError(f"{url} needs the deployment secret (DISTSERVE_SECRET_FILE) for its password")
    netloc = f"{USER}:{redis_password(secret)}@{parts.netloc.split('@', 1)[1]}"
    return urlunsplit(parts._replace(netloc=netloc))
