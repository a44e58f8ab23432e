"""kvxfer with a deployment secret: callers without its token are refused, and only a pool's owner uses it."""

from __future__ import annotations

import asyncio
import stat
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from distserve.v1 import kv_pb2, kvxfer_pb2, kvxfer_pb2_grpc
from services.common import local_socket
from services.common.auth import KVXFER, PRINCIPAL_KEY, TOKEN_KEY, TOOL, instance_principal, token
from services.common.links import internal_channel
from services.common.pool_site import layout_to_pb
from services.common.secret import read_secret
from services.kvxfer.client import KVXferClient, PullFailed
from services.kvxfer.ranged import RangeCopy
from tests.integration.kvxfer.conftest import LAYOUT, block_bytes
from tests.tls_certs import Authority

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.mark.parametrize("link", ["tcp", "same-host socket"])
async def test_calls_without_a_valid_token_are_refused_and_change_nothing(link, secret_file, start_kvxfer,
                                                                         make_pool) -> None:
    host = await start_kvxfer()
    target = host.address if link == "tcp" else local_socket.dial_target(host.address)
    assert target is not None
    owner = KVXferClient(host.address, instance_principal("p0"))
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    await owner.register_pool("p0", src.site)
    handle = await owner.create_lease("p0", [1, 2], num_tokens=20, ttl_s=30)
    before = await owner.stats()
    forged = ((PRINCIPAL_KEY, instance_principal("p0")), (TOKEN_KEY, token(b"another deployment" * 2, instance_principal("p0"))))
    async with grpc.aio.insecure_channel(target) as channel:
        stub = kvxfer_pb2_grpc.KVXferStub(channel)
        calls = {
            "register": lambda md: stub.RegisterPool(kvxfer_pb2.RegisterPoolRequest(
                instance_id="d0", layout=layout_to_pb(LAYOUT), device="cpu", shm_path=dst.site.path), metadata=md),
            "lease": lambda md: stub.CreateLease(kvxfer_pb2.CreateLeaseRequest(
                instance_id="p0", block_ids=[3], num_tokens=10, ttl_s=30), metadata=md),
            "release": lambda md: stub.Release(kvxfer_pb2.ReleaseRequest(lease_id=handle.lease_id), metadata=md),
            "unregister": lambda md: stub.UnregisterPool(kvxfer_pb2.UnregisterPoolRequest(instance_id="p0"), metadata=md),
        }
        for name, call in calls.items():
            for metadata in ((), forged, ((PRINCIPAL_KEY, instance_principal("p0")),)):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(metadata)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, name

        # The pulls take the credential in the body; a valid metadata token does not stand in for it.
        p0 = instance_principal("p0")
        valid_md = ((PRINCIPAL_KEY, p0), (TOKEN_KEY, token(read_secret(Path(secret_file)), p0)))
        src_at, dst_at, length = RangeCopy("p0", "p0", *(np.array([n * LAYOUT.block_bytes]) for n in (1, 5, 1))).to_bytes()
        ranges = [kvxfer_pb2.RangeCopy(src_pool_id="p0", dst_pool_id="p0", src_offsets=src_at, dst_offsets=dst_at,
                                       lengths=length)]
        pulls = {
            "pull": lambda cred, md: stub.Pull(kvxfer_pb2.PullRequest(
                source=handle, dst_instance_id="p0", dst_block_ids=[5, 6], credential=cred), metadata=md),
            "pull ranges": lambda cred, md: stub.PullRanges(kvxfer_pb2.PullRangesRequest(
                source=handle, copies=ranges, credential=cred), metadata=md),
        }
        bodies = (None, kvxfer_pb2.Credential(principal=p0, token=forged[1][1]), kvxfer_pb2.Credential(principal=p0),
                  kvxfer_pb2.Credential(token=valid_md[1][1]))
        for name, call in pulls.items():
            for credential, metadata in [*((body, ()) for body in bodies), (None, valid_md)]:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(credential, metadata)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, (name, credential, metadata)
                assert "credential" in (refused.value.details() or ""), refused.value.details()
    assert await owner.stats() == before  # still one pool, one live lease, no pull
    assert await owner.release(handle.lease_id)
    await owner.close()


async def test_one_instance_cannot_use_another_instances_pool(secret_file, start_kvxfer, make_pool) -> None:
    host = await start_kvxfer()
    a, b = KVXferClient(host.address, instance_principal("p0")), KVXferClient(host.address, instance_principal("d0"))
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    await a.register_pool("p0", src.site)
    handle = await a.create_lease("p0", [1, 2, 3], num_tokens=40, ttl_s=30)

    denied = [
        b.register_pool("p0", src.site),  # take over a's name
        b.create_lease("p0", [4], num_tokens=10),
        b.release(handle.lease_id),
        b.unregister_pool("p0"),
        b.pull(handle, "p0", [7, 8, 9]),  # write into a's pool
        b.pull_ranges(handle, [RangeCopy("p0", "p0", *(np.array([n * LAYOUT.block_bytes]) for n in (1, 7)),
                                         np.array([LAYOUT.block_bytes]))]),  # the same, by byte ranges
        anext(b.watch_leases("p0")),
    ]
    for call in denied:
        with pytest.raises((grpc.aio.AioRpcError, PullFailed)) as refused:
            await call
        code = refused.value.code() if isinstance(refused.value, grpc.aio.AioRpcError) else refused.value.code
        assert code is grpc.StatusCode.PERMISSION_DENIED, refused.value
    stats = await a.stats()
    assert (stats.pools, stats.live_leases, stats.pulls_ok, stats.pulls_failed) == (1, 1, 0, 0)

    await b.register_pool("d0", dst.site)  # b's own pool, with the lease it was handed: the pull goes through
    result = await b.pull(handle, "d0", [7, 8, 9])
    assert result.path == "same-host" and block_bytes(dst, [7, 8, 9]) == block_bytes(src, [1, 2, 3])
    assert (await a.stats()).live_leases == 0
    for client in (a, b):
        await client.close()


async def test_a_lease_id_is_needed_to_pull(secret_file, start_kvxfer, make_pool) -> None:
    host = await start_kvxfer()
    a, b = KVXferClient(host.address, instance_principal("p0")), KVXferClient(host.address, instance_principal("d0"))
    await a.register_pool("p0", make_pool("p0").site)
    await b.register_pool("d0", make_pool("d0", fill=False).site)
    handle = await a.create_lease("p0", [1], num_tokens=10, ttl_s=30)
    guessed = kv_pb2.KVHandle()
    guessed.CopyFrom(handle)
    guessed.lease_id = "0" * 32
    with pytest.raises(PullFailed) as failed:
        await b.pull(guessed, "d0", [2])
    assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert (await a.stats()).live_leases == 1
    for client in (a, b):
        await client.close()


async def test_ucx_peers_without_the_token_are_refused(secret_file, start_kvxfer, make_pool) -> None:
    host = await start_kvxfer()
    a = KVXferClient(host.address, instance_principal("p0"))
    await a.register_pool("p0", make_pool("p0").site)
    handle = await a.create_lease("p0", [1], num_tokens=10, ttl_s=60)
    async with internal_channel(host.address, TOOL) as channel:
        described = await kvxfer_pb2_grpc.KVXferStub(channel).Describe(kvxfer_pb2.DescribeRequest())
    real = token(read_secret(Path(secret_file)), KVXFER)
    for presented in ("-", token(b"another deployment's secret, 32 bytes", KVXFER), real):
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.integration.kvxfer.ucx_intruder", described.ucx_host, str(described.ucx_port),
            handle.lease_id, "p0", presented, stdout=asyncio.subprocess.PIPE, cwd=ROOT)
        outcome = (await asyncio.wait_for(run.communicate(), 60))[0].decode().strip().splitlines()[-1]
        if presented == real:  # the same order with the token goes through: the refusals were the token's
            assert outcome == "pulled", outcome
        else:
            assert outcome.startswith("refused"), outcome
            stats = await a.stats()
            assert (stats.live_leases, stats.pulls_ok, stats.pulls_failed) == (1, 0, 0)
    await a.close()


async def test_cross_host_pulls_carry_the_token(secret_file, start_kvxfer, make_pool) -> None:
    host_a, host_b = await start_kvxfer(), await start_kvxfer()
    a, b = KVXferClient(host_a.address, instance_principal("p0")), KVXferClient(host_b.address, instance_principal("d0"))
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    await a.register_pool("p0", src.site)
    await b.register_pool("d0", dst.site)
    handle = await a.create_lease("p0", [1, 5, 9], num_tokens=40, ttl_s=30)
    result = await b.pull(handle, "d0", [2, 3, 4], checksum=True)
    assert result.path == "cross-host" and block_bytes(dst, [2, 3, 4]) == block_bytes(src, [1, 5, 9])
    for client in (a, b):
        await client.close()


async def test_mutual_tls_admits_only_certificates_of_the_deployments_ca(secret_file, tmp_path, monkeypatch,
                                                                        start_kvxfer, make_pool) -> None:
    ours, theirs = Authority("deployment"), Authority("someone else")
    for var, path in ours.issue(tmp_path / "ours", "kvxfer").items():
        monkeypatch.setenv(var, path)
    host = await start_kvxfer()  # serves mutual TLS with our certificate
    a = KVXferClient(host.address, instance_principal("p0"))
    await a.register_pool("p0", make_pool("p0").site)
    assert (await a.stats()).pools == 1

    for var, path in theirs.issue(tmp_path / "theirs", "intruder").items():
        monkeypatch.setenv(var, path)  # a client certificate (and trust) from another CA
    intruder = KVXferClient(host.address, instance_principal("p0"), local=False)  # the TCP port, as from another host
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await intruder.create_lease("p0", [1], num_tokens=10)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    for var in ("DISTSERVE_TLS_CA", "DISTSERVE_TLS_CERT", "DISTSERVE_TLS_KEY"):
        monkeypatch.delenv(var)
    plaintext = KVXferClient(host.address, instance_principal("p0"), local=False)  # the right token, but no TLS
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await plaintext.create_lease("p0", [1], num_tokens=10, ttl_s=5)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert (await a.stats()).live_leases == 0
    for client in (a, intruder, plaintext):
        await client.close()


async def test_same_host_clients_dial_the_private_socket_without_tls(secret_file, tmp_path, monkeypatch,
                                                                    start_kvxfer, make_pool) -> None:
    for var, path in Authority("deployment").issue(tmp_path / "ours", "kvxfer").items():
        monkeypatch.setenv(var, path)
    host = await start_kvxfer()  # mutual TLS on its TCP port
    sock = local_socket.socket_path(host.address)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    for var in ("DISTSERVE_TLS_CA", "DISTSERVE_TLS_CERT", "DISTSERVE_TLS_KEY"):
        monkeypatch.delenv(var)  # no certificate at all: only the socket admits this client
    local = KVXferClient(host.address, instance_principal("p0"))
    await local.register_pool("p0", make_pool("p0").site)
    handle = await local.create_lease("p0", [1], num_tokens=10, ttl_s=30)
    tcp = KVXferClient(host.address, instance_principal("p0"), local=False)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await tcp.release(handle.lease_id)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert (await local.stats()).live_leases == 1
    for client in (local, tcp):
        await client.close()
    host.stop()
    assert not sock.exists()  # removed on a graceful stop
