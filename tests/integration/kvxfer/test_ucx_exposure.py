"""What a kvxfer serving on loopback exposes beyond it: only UCX's connection listener (ucxx binds it on every
interface: its create_listener takes no address). A peer that reaches it through a non-loopback address of
this host is refused, with or without the deployment's token: UCX's transports are on lo only, so no
endpoint can be made for a connection that arrived on another device."""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from pathlib import Path

import psutil
import pytest

from distserve.v1 import kvxfer_pb2, kvxfer_pb2_grpc
from services.common.auth import KVXFER, TOOL, instance_principal, token
from services.common.links import internal_channel
from services.common.secret import SECRET_ENV, ensure_secret, read_secret
from services.kvxfer.client import KVXferClient

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _outside_address() -> str:
    """An IPv4 address of this host that is not loopback; the test is skipped without one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name == "AF_INET" and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    pytest.skip("this host has no non-loopback IPv4 address")


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # gRPC's IPv6 socket shows 127.0.0.1 as ::ffff:127.0.0.1
    return (mapped or address).is_loopback


def _listening(pid: int) -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


async def _intrude(address: str, port: int, lease_id: str, presented: str) -> str:
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.kvxfer.ucx_intruder", address, str(port), lease_id, "p0", presented,
        stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    return (await asyncio.wait_for(run.communicate(), 60))[0].decode().strip().splitlines()[-1]


async def test_a_loopback_kvxfer_opens_only_its_ucx_listener_beyond_loopback(
        tmp_path, monkeypatch, start_kvxfer, make_pool) -> None:
    secret = ensure_secret(tmp_path / "secret")
    monkeypatch.setenv(SECRET_ENV, str(secret))
    outside = _outside_address()
    host = await start_kvxfer("--ucx-port", "0")
    owner = KVXferClient(host.address, instance_principal("p0"))
    await owner.register_pool("p0", make_pool("p0").site)
    handle = await owner.create_lease("p0", [1], num_tokens=10, ttl_s=60)
    async with internal_channel(host.address, TOOL) as channel:
        described = await kvxfer_pb2_grpc.KVXferStub(channel).Describe(kvxfer_pb2.DescribeRequest())

    exposed = {(ip, port) for ip, port in _listening(host.proc.pid) if not _loopback(ip)}
    # UCX's transports stay on lo (UCX_NET_DEVICES); its connection listener is on the wildcard address
    assert exposed == {("0.0.0.0", described.ucx_port)}, exposed

    real = token(read_secret(secret), KVXFER)
    for presented in ("-", real):
        refused = await _intrude(outside, described.ucx_port, handle.lease_id, presented)
        assert refused.startswith("refused"), refused
        stats = await owner.stats()
        assert (stats.live_leases, stats.pulls_ok, stats.pulls_failed) == (1, 0, 0)
    # the same order with the token on loopback goes through: the refusals were the address's
    assert await _intrude("127.0.0.1", described.ucx_port, handle.lease_id, real) == "pulled"
    await owner.close()


async def test_ucx_connections_from_outside_the_allowed_networks_are_rejected(
        tmp_path, monkeypatch, start_kvxfer, make_pool) -> None:
    """The check on each connection request (conn_filter.py): 127.0.0.1 is not in 127.0.0.2/32, so even the
    deployment's own token does not get a pull through; the same kvxfer admits it once its network is allowed."""
    secret = ensure_secret(tmp_path / "secret")
    monkeypatch.setenv(SECRET_ENV, str(secret))
    real = token(read_secret(secret), KVXFER)
    for allow, expected in (("127.0.0.2/32", "refused"), ("10.9.0.0/16,127.0.0.0/8", "pulled")):
        host = await start_kvxfer("--ucx-allow", allow)
        owner = KVXferClient(host.address, instance_principal("p0"))
        await owner.register_pool("p0", make_pool("p0").site)
        handle = await owner.create_lease("p0", [1], num_tokens=10, ttl_s=60)
        async with internal_channel(host.address, TOOL) as channel:
            described = await kvxfer_pb2_grpc.KVXferStub(channel).Describe(kvxfer_pb2.DescribeRequest())
        outcome = await _intrude("127.0.0.1", described.ucx_port, handle.lease_id, real)
        assert outcome.startswith(expected), (allow, outcome)
        stats = await owner.stats()
        assert (stats.live_leases, stats.pulls_ok) == ((1, 0) if expected == "refused" else (0, 0)), stats
        await owner.close()
        host.stop()
