"""The router's and the planner's front doors: API keys on gRPC and HTTP, open health, bounded bodies."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import httpx
import pytest
from fastapi.testclient import TestClient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common import api_keys
from services.common.api_keys import add_key, revoke_key
from services.common.net import free_port
from services.common.tls import client_port_channel
from services.launcher.health import POLL_OPTIONS
from services.planner.api import create_app
from services.planner.config import PlannerSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def start_router(model: str, redis_url: str, *flags: str) -> tuple[subprocess.Popen, int, int]:
    """A router without instances: a request past its doors gets UNAVAILABLE at once (no wait for one to come)."""
    grpc_port, http_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "services", "--log-level", "WARNING", "router", "--model", model, "--redis-url",
           redis_url, "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--max-body-bytes", "65536",
           "--wait-instance-s", "0", *flags]
    return subprocess.Popen(cmd), grpc_port, http_port


def wait_answering(address: str, proc: subprocess.Popen, timeout_s: float = 60, ca: bytes | None = None) -> None:
    """Until the router's health service answers at all (it says NOT_SERVING while it has no instances); over
    TLS checked against `ca` when given."""
    deadline = time.monotonic() + timeout_s
    with client_port_channel(address, ca, POLL_OPTIONS) as channel:
        while True:
            assert proc.poll() is None, "router exited"
            try:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
                return
            except grpc.RpcError:
                assert time.monotonic() < deadline, "router not answering"
                time.sleep(0.1)


def test_router_serves_only_callers_with_a_current_key(tmp_path, tiny_llama_dir: str, redis_url: str) -> None:
    path = tmp_path / "keys"
    key, other = add_key(path, "alice"), add_key(path, "bob")
    proc, grpc_port, http_port = start_router(tiny_llama_dir, redis_url, "--api-key-file", str(path))
    try:
        wait_answering(f"127.0.0.1:{grpc_port}", proc)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = router_pb2_grpc.RouterStub(channel)

            def generate(metadata) -> grpc.StatusCode:
                try:
                    list(stub.Generate(router_pb2.GenerateRequest(prompt="hi", max_tokens=2), timeout=10,
                                       metadata=metadata))
                except grpc.RpcError as exc:
                    return exc.code()
                return grpc.StatusCode.OK

            assert generate(()) is grpc.StatusCode.UNAUTHENTICATED
            assert generate((("authorization", "Bearer ds-guessed"),)) is grpc.StatusCode.UNAUTHENTICATED
            assert generate((("authorization", f"Bearer {key}"),)) is grpc.StatusCode.UNAVAILABLE  # past the door
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)  # open, no key

            base = f"http://127.0.0.1:{http_port}"
            assert httpx.get(f"{base}/v1/models", timeout=5).status_code == 401
            assert httpx.get(f"{base}/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=5).status_code == 200
            assert httpx.get(f"{base}/health", timeout=5).status_code in (200, 503)  # open: no instance, no 401
            for route, body in (("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [1]})):  # keyed too
                assert httpx.post(f"{base}{route}", json=body, timeout=5).status_code == 401
                assert httpx.post(f"{base}{route}", json=body, headers={"authorization": f"Bearer {key}"},
                                  timeout=5).status_code == 200  # the tokenizer needs no instance
            big = httpx.post(f"{base}/v1/completions", headers={"authorization": f"Bearer {key}"}, timeout=5,
                             content=b"{" + b" " * 70000 + b"}")
            assert big.status_code == 413

            revoke_key(path, "alice")
            time.sleep(api_keys.RELOAD_S + 0.2)
            assert generate((("authorization", f"Bearer {key}"),)) is grpc.StatusCode.UNAUTHENTICATED
            assert generate((("authorization", f"Bearer {other}"),)) is grpc.StatusCode.UNAVAILABLE
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_router_without_keys_does_not_bind_beyond_loopback(tiny_llama_dir: str, redis_url: str) -> None:
    proc, _, _ = start_router(tiny_llama_dir, redis_url, "--host", "0.0.0.0")
    assert proc.wait(timeout=60) != 0


def test_planner_posts_need_an_admin_key(tmp_path) -> None:
    path = tmp_path / "admin"
    key = add_key(path, "ops")
    api = TestClient(create_app(PlannerSettings(admin_key_file=str(path), max_body_bytes=4096)))
    for route in ("/v1/plan", "/v1/replan", "/v1/simulate"):
        assert api.post(route, json={"model": "opt-13b"}).status_code == 401
        assert api.post(route, json={}, headers={"authorization": "Bearer ds-guessed"}).status_code == 401
    assert api.post("/v1/plan", json={"model": 7}, headers={"authorization": f"Bearer {key}"}).status_code in (400, 422)
    assert api.post("/v1/plan", content=b"x" * 5000, headers={"authorization": f"Bearer {key}"}).status_code == 413
    assert api.get("/healthz").status_code == 200 and api.get("/metrics").status_code == 200
    assert api.get("/v1/plan").status_code == 404  # read-only, open: no plan was made
