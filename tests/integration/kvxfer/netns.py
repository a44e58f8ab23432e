"""Two network namespaces joined by a veth pair: two hosts with their own addresses on one machine.

Making them needs root (CAP_NET_ADMIN) and iproute2; `make_veth_pair` says why when it cannot.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from dataclasses import dataclass

SUBNET = "10.231.0"  # private to the two namespaces: concurrent runs do not collide


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here (not root, no CAP_NET_ADMIN, no `ip`)."""


@dataclass(frozen=True, slots=True)
class Host:
    netns: str
    device: str  # its end of the veth pair
    address: str


@dataclass(frozen=True, slots=True)
class VethPair:
    a: Host
    b: Host

    def delete(self) -> None:
        """Delete both namespaces (the veth pair goes with them); a missing one is not an error."""
        for host in (self.a, self.b):
            subprocess.run(["ip", "netns", "delete", host.netns], check=False, capture_output=True, timeout=10)


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=10)
    except FileNotFoundError as e:
        raise NetnsUnavailable("the `ip` command (iproute2) is not installed") from e
    if done.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


def make_veth_pair() -> VethPair:
    """Namespaces A (SUBNET.1) and B (SUBNET.2), names unique to this call, linked by a veth pair."""
    tag = uuid.uuid4().hex[:8]
    pair = VethPair(Host(f"dsx-{tag}-a", f"dsx{tag}a", f"{SUBNET}.1"),
                    Host(f"dsx-{tag}-b", f"dsx{tag}b", f"{SUBNET}.2"))
    try:
        for host in (pair.a, pair.b):
            _ip("netns", "add", host.netns)
        _ip("link", "add", pair.a.device, "netns", pair.a.netns, "type", "veth",
            "peer", "name", pair.b.device, "netns", pair.b.netns)
        for host in (pair.a, pair.b):
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.device)
            _ip("-n", host.netns, "link", "set", host.device, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
        _wait_running(pair)
    except BaseException:
        pair.delete()
        raise
    return pair


def _operstate(host: Host) -> str:
    out = subprocess.run(["ip", "-n", host.netns, "-j", "link", "show", "dev", host.device],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return json.loads(out)[0]["operstate"]


def _wait_running(pair: VethPair, timeout_s: float = 10.0) -> None:
    """Wait till both ends have carrier: the kernel reports it up to a second after `link set up`, and UCX,
    which lists its devices once when a process starts, leaves out a device without it (its pulls then fail
    with "Destination is unreachable")."""
    deadline = time.monotonic() + timeout_s
    while (states := [_operstate(h) for h in (pair.a, pair.b)]) != ["UP", "UP"]:
        if time.monotonic() > deadline:
            raise NetnsUnavailable(f"the veth pair did not come up in {timeout_s:.0f} s: {states}")
        time.sleep(0.02)


def tx_bytes(host: Host) -> int:
    """Bytes sent so far from the host's end of the veth pair."""
    out = subprocess.run(["ip", "-n", host.netns, "-j", "-s", "link", "show", "dev", host.device],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return json.loads(out)[0]["stats64"]["tx"]["bytes"]
