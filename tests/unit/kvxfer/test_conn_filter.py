"""Which client addresses kvxfer's UCX listener admits (conn_filter.py)."""

from __future__ import annotations

import pytest

from services.kvxfer.ucx.conn_filter import peer_filter


def test_allowed_networks_are_exactly_those_given() -> None:
    screen = peer_filter("10.0.0.0/24, fd00::/8", "0.0.0.0")
    assert screen.admits("10.0.0.7") and screen.admits("fd00::1") and screen.admits("::ffff:10.0.0.7")
    assert not screen.admits("10.0.1.7") and not screen.admits("127.0.0.1") and not screen.admits("not an address")


def test_default_is_loopback_only_on_a_loopback_host_and_anyone_elsewhere() -> None:
    loopback = peer_filter("", "127.0.0.1")
    assert loopback.admits("127.0.0.1") and loopback.admits("::1") and loopback.admits("::ffff:127.0.0.1")
    assert not loopback.admits("192.168.1.2")
    assert peer_filter("", "10.0.0.1") is None and peer_filter("", "node-a") is None


def test_a_bad_network_names_the_setting() -> None:
    with pytest.raises(ValueError, match="ucx_allow"):
        peer_filter("10.0.0.0/33", "127.0.0.1")
