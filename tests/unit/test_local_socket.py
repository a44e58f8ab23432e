"""The same-host socket a client dials instead of host:port (local_socket.py): only a socket of this user."""

from __future__ import annotations

import socket

from services.common import local_socket


def test_a_client_dials_only_a_socket_in_the_private_directory() -> None:
    address = "127.0.0.1:1"  # no server: the names are this test's own
    path = local_socket.socket_path(address)
    assert path.name == "kvxfer-127.0.0.1-1.sock" and local_socket.dial_target(address) is None
    target = local_socket.serving_target(address)
    path.write_text("not a socket")
    try:
        assert local_socket.dial_target(address) is None
        path.unlink()
        with socket.socket(socket.AF_UNIX) as listening:
            listening.bind(target.removeprefix("unix:"))
            local_socket.restrict(address)
            assert local_socket.dial_target(address) == target and path.stat().st_mode & 0o777 == 0o600
            assert local_socket.serving_target(address) == target and not path.exists()  # a stale socket goes
    finally:
        local_socket.remove(address)
