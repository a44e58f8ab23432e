"""Wires one kvxfer process: gRPC (KVXfer + health), the UCX listener, the expiry loop, metrics."""

from __future__ import annotations

import asyncio
import logging
import signal

from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from distserve.v1 import kvxfer_pb2_grpc
from services.common import local_socket
from services.common.auth import KVXFER, TokenCheck, token
from services.common.links import add_local_port, add_port, internal_server
from services.common.secret import deployment_secret
from services.kvxfer.config import KVXferConfig
from services.kvxfer.core import KVXferCore
from services.kvxfer.metrics import XferMetrics
from services.kvxfer.pools import blocks_kernel, copy_kernel
from services.kvxfer.server import KVXferServicer
from services.kvxfer.ucx.conn_filter import helper as conn_helper
from services.kvxfer.ucx.conn_filter import peer_filter
from services.kvxfer.ucx.env import apply_ucx_env, keep_ucx_on_loopback
from services.kvxfer.ucx.iov import helper
from services.kvxfer.ucx.peers import GrpcPeers
from services.kvxfer.ucx.sealing import Sealer, kv_key

log = logging.getLogger(__name__)
SERVICE = "distserve.v1.KVXfer"


async def serve(config: KVXferConfig) -> None:
    """Serve until SIGTERM or SIGINT."""
    apply_ucx_env(config)
    keep_ucx_on_loopback(config.host)
    from services.kvxfer.ucx.loop import UcxLoop
    from services.kvxfer.ucx.transport import UcxPuller, UcxServer  # after the UCX environment is set

    c_loop = copy_kernel() is not None and blocks_kernel() is not None  # built now, not in the first pull
    iov = helper() is not None
    server = internal_server(64 << 20)
    port = add_port(server, config.host, config.port)
    address = f"{config.host}:{port}"
    add_local_port(server, address)  # this host's instances: no TLS on bytes that never leave the host
    metrics = XferMetrics()
    peers = GrpcPeers(config.connect_timeout_s)
    ucx_loop = UcxLoop()
    secret = deployment_secret()
    ucx_token = token(secret, KVXFER) if secret is not None else ""
    sealer = _sealer(config, secret)
    puller = UcxPuller(ucx_loop, config.connect_timeout_s, ucx_token, sealer)
    core = KVXferCore(address, peers, puller, config.lease_ttl_s, config.pull_timeout_s, metrics)
    ucx = UcxServer(ucx_loop, core, ucx_token, _admission(config), sealer)
    ucx_port = ucx.start(config.ucx_port)
    tokens = TokenCheck(secret) if secret is not None else None  # the pulls' body credentials (auth.py)
    kvxfer_pb2_grpc.add_KVXferServicer_to_server(KVXferServicer(core, config.host_id, config.host, ucx_port, tokens),
                                                 server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if config.metrics_port:
        start_http_server(config.metrics_port, addr=config.host, registry=metrics.registry)
    await server.start()
    local_socket.restrict(address)
    expiry = asyncio.create_task(core.run_expiry(config.expiry_interval_s))
    for name in ("", SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("kvxfer serving gRPC on %s, UCX on port %d, metrics on %s; C copy loop %s, scatter-gather frames %s, "
             "KV encryption %s", core.address, ucx_port, config.metrics_port or "none", _on(c_loop), _on(iov),
             "on" if sealer else "off")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("kvxfer stopping")
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=2.0)
    local_socket.remove(address)
    expiry.cancel()
    puller.close()
    ucx.close()
    ucx_loop.close()
    if sealer is not None:
        sealer.close()
    await peers.close()


def _admission(config: KVXferConfig):
    """The UCX listener's peer check (conn_filter.py), or None: anyone may connect (the hello decides)."""
    try:
        screen = peer_filter(config.ucx_allow, config.host)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if screen is None:
        return None
    if conn_helper() is None:
        if config.ucx_allow:
            raise SystemExit("--ucx-allow needs the UCX connection helper (ucp_conn.c), which could not be built")
        log.warning("UCX connection helper not built: the UCX listener accepts connections from any address "
                    "(its transports stay on loopback; the hello token still decides)")
        return None
    return screen.admits


def _sealer(config: KVXferConfig, secret: bytes | None) -> Sealer | None:
    """What encrypts KV on cross-host pulls, or None (off)."""
    if not config.encrypt_kv:
        return None
    if secret is None:
        raise SystemExit("--encrypt-kv needs the deployment secret (DISTSERVE_SECRET_FILE): the key derives from it")
    return Sealer(kv_key(secret))


def _on(built: bool) -> str:
    return "on" if built else "off (no C compiler, or DISTSERVE_CPU_KERNELS=0)"
