"""Readiness by the gRPC health service: wait until a server says SERVING (never a fixed sleep)."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.links import blocking_channel
from services.common.tls import client_port_channel

# A channel refused once backs off before it dials again (gRPC's default: a second, growing 1.6-fold), so a
# server that came up while a wait's channel backed off went unnoticed for seconds: dial as often as it polls.
POLL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 100))


def _channel(address: str, internal: bool, client_ca: bytes | None) -> grpc.Channel:
    """Internal servers speak mutual TLS where it is configured; the router's client port its own TLS, if any."""
    if internal:
        return blocking_channel(address, POLL_OPTIONS)
    return client_port_channel(address, client_ca, POLL_OPTIONS)


def is_serving(address: str, timeout_s: float = 1.0, internal: bool = True, client_ca: bytes | None = None) -> bool:
    """Whether the server at `address` answers its health check with SERVING."""
    with _channel(address, internal, client_ca) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def wait_serving(address: str, process: subprocess.Popen | None, timeout_s: float, name: str,
                 internal: bool = True, client_ca: bytes | None = None) -> None:
    """Polls the health service of `address` until SERVING; raises if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    with _channel(address, internal, client_ca) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited with code {process.returncode} before serving")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} at {address} not serving after {timeout_s:.0f} s")
            time.sleep(0.1)


def wait_http_ok(url: str, process: subprocess.Popen | None, timeout_s: float, name: str) -> None:
    """Polls `url` (an HTTP liveness route) until it answers 200; raises if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} before serving")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as reply:
                if reply.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} at {url} not serving after {timeout_s:.0f} s")
        time.sleep(0.1)
