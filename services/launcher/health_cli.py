"""`distserve health ADDRESS`: exit 0 when the server is serving, 1 otherwise (container health checks).

ADDRESS is host:port for the gRPC health service, or an http(s):// URL that must answer 2xx (the planner's
REST API)."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from pathlib import Path

from services.launcher.health import is_serving


def _http_ok(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return 200 <= reply.status < 300
    except (urllib.error.URLError, OSError):
        return False


def _health(args: argparse.Namespace) -> int:
    if args.address.startswith(("http://", "https://")):
        ok = _http_ok(args.address, args.timeout)
    else:
        ca = Path(args.tls_ca).read_bytes() if args.tls_ca else None
        ok = is_serving(args.address, args.timeout, internal=not (args.plaintext or ca), client_ca=ca)
    if not ok:
        print(f"{args.address}: not serving", file=sys.stderr)
    return 0 if ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("health", help="exit 0 when ADDRESS serves (gRPC health SERVING, or HTTP 2xx), else 1")
    p.add_argument("address", help="host:port of a gRPC server, or an http(s):// URL")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    p.add_argument("--plaintext", action="store_true", help="a client port (the router's): no mutual TLS even where "
                   "DISTSERVE_TLS_* is set")
    p.add_argument("--tls-ca", default="", help="a client port over TLS (the router's with --tls-cert): check its "
                   "certificate against this CA")
    p.set_defaults(func=_health)
