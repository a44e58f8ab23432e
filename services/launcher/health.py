"""Readiness by the gRPC health service: wait until a server says SERVING (never a fixed sleep)."""

from __future__ import annotations

import subprocess
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(stub: health_pb2_grpc.HealthStub, timeout_s: float) -> bool:
    """One health check: True when the server answers SERVING within `timeout_s`."""
    try:
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s).status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


def is_serving(address: str, timeout_s: float) -> bool:
    """One health check of the server at `address` on a channel of its own."""
    with grpc.insecure_channel(address) as channel:
        return check(health_pb2_grpc.HealthStub(channel), timeout_s)


def wait_serving(address: str, process: subprocess.Popen | None, timeout_s: float, name: str) -> None:
    """Polls the health service of `address` until SERVING; raises if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited with code {process.returncode} before serving")
            if check(stub, 1.0):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} at {address} not serving after {timeout_s:.0f} s")
            time.sleep(0.1)
