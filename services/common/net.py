"""Small networking helpers: free loopback ports."""

from __future__ import annotations

import random
import socket

# Below Linux's ephemeral range (32768-60999), so a port handed out here is not taken meanwhile by the
# source port of some outgoing connection before its server binds it.
_LOW, _HIGH = 20000, 32000


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    for _ in range(100):
        port = random.randrange(_LOW, _HIGH)
        if _bindable(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
