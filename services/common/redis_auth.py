"""Redis's password for a deployment: derived from the deployment secret, so it never travels on a command line.

The deployment's redis-server (the launcher's embedded one, or the compose files' with `acl_text` as its
--aclfile) admits only the ACL user `distserve` (the default user is off), with the password
HMAC(secret, "redis"). URLs name the user without a password (redis://distserve@host:port/0); every process
that holds the secret connects with `client`, which fills the password in. A `rediss://` URL (Redis across
hosts) is dialed over TLS with the deployment's certificates (tls.py's DISTSERVE_TLS_* files): the server's
certificate checked against the deployment's CA, this process's own presented.
"""

from __future__ import annotations

import os
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from services.common.auth import token
from services.common.secret import client_secret
from services.common.tls import ENV as TLS_ENV
from services.common.tls import SERVER_NAME_ENV

Client = TypeVar("Client")

USER = "distserve"


def redis_password(secret: bytes) -> str:
    return token(secret, "redis")


def acl_text(password: str) -> str:
    """An ACL file for redis-server: the default user off, the deployment's user with every right."""
    return f"user default off\nuser {USER} on >{password} ~* &* +@all\n"


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


def tls_options(url: str) -> dict[str, str | bool]:
    """redis-py's TLS arguments for `url`: none for redis://; for rediss://, the deployment's certificates."""
    if urlsplit(url).scheme != "rediss":
        return {}
    paths = {field: os.environ.get(var, "") for field, var in TLS_ENV.items()}
    if not all(paths.values()):
        raise ValueError(f"{url} is TLS: it needs {', '.join(TLS_ENV.values())}")
    # one certificate for the whole deployment (DISTSERVE_TLS_SERVER_NAME) names no node: the CA vouches alone
    return {"ssl_ca_certs": paths["ca"], "ssl_certfile": paths["cert"], "ssl_keyfile": paths["key"],
            "ssl_cert_reqs": "required", "ssl_check_hostname": not os.environ.get(SERVER_NAME_ENV)}


def client(cls: type[Client], url: str, **options: object) -> Client:
    """A redis-py client of class `cls` (redis.Redis or redis.asyncio.Redis) for the deployment's `url`."""
    return cls.from_url(resolve_url(url), **tls_options(url), **options)  # type: ignore[attr-defined]
