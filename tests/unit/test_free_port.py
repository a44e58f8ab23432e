"""free_port: a launcher picks every port before any server binds one, so no port may be handed out twice."""

import itertools
import socket

from services.common import net


def _unbound_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_port_still_free_is_not_handed_out_twice(monkeypatch):
    port, other = _unbound_port(), _unbound_port()
    draws = itertools.chain([port, port, port], itertools.repeat(other))
    monkeypatch.setattr(net.random, "randrange", lambda low, high: next(draws))
    monkeypatch.setattr(net, "_handed_out", set())
    assert net.free_port() == port and net.bindable("127.0.0.1", port)  # nothing bound it: still free
    assert net.free_port() == other
