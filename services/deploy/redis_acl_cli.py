"""`distserve redis-acl --out F`: the ACL file of a compose deployment's Redis (its --aclfile secret).

It holds the password every service derives from the deployment secret (redis_auth.py), so the file and
the secret must come from the same deployment; rewrite it whenever the secret is rotated.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def _write(args: argparse.Namespace) -> int:
    from services.common.redis_auth import acl_text, redis_password
    from services.common.secret import read_secret

    text = acl_text(redis_password(read_secret(Path(args.secret_file))))
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps no wider mode
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("redis-acl", help="write the ACL file of a compose deployment's Redis (0600)")
    p.add_argument("--secret-file", required=True, help="the deployment secret (the compose files' distserve_secret)")
    p.add_argument("--out", required=True, help="where to write it (the compose files' distserve_redis_acl)")
    p.set_defaults(func=_write)
