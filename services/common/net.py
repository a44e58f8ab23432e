"""Small networking helpers: free loopback ports."""

from __future__ import annotations

import ipaddress
import random
import socket

# Below Linux's ephemeral range (32768-60999), so a port handed out here is not taken meanwhile by the
# source port of some outgoing connection before its server binds it.
_LOW, _HIGH = 20000, 32000


def bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


_handed_out: set[int] = set()  # ports free_port returned in this process


def free_port(host: str = "127.0.0.1") -> int:
    """A port of `host` that is free now and that this process has not handed out before: a launcher picks
    several ports before any of their servers binds, and one picked twice left two servers racing for it
    (the planner lost its port to kvxfer's metrics and the stack ran without it)."""
    for _ in range(100):
        port = random.randrange(_LOW, _HIGH)
        if port not in _handed_out and bindable(host, port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    _handed_out.add(port)
    return port


# gRPC servers set SO_REUSEPORT by default, so a second server binds a taken port and the two share its
# connections silently; without it a taken port is an error at start.
EXCLUSIVE_PORT = [("grpc.so_reuseport", 0)]


def bind_port(server, host: str, port: int, credentials=None) -> int:
    """Binds a gRPC server (made with EXCLUSIVE_PORT) to host:port (with TLS `credentials` if given); SystemExit
    naming it when it is taken."""
    try:
        address = f"{host}:{port}"
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise SystemExit(f"cannot bind {host}:{port}: the port is in use")
    return bound


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or "localhost") is a loopback address; a host name is not."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
