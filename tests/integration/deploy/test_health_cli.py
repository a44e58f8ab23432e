"""`distserve health`, the container health check: exit 0 only while the server says it serves."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.cli import main
from services.common.net import free_port


def health_exit(address: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(["health", address, "--timeout", "2"])
    return exit_.value.code


@pytest.fixture
def grpc_health() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_grpc_server_serving_then_not(grpc_health: tuple[str, health.HealthServicer]) -> None:
    address, servicer = grpc_health
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert health_exit(address) == 0
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert health_exit(address) == 1


def test_nothing_listening_is_unhealthy() -> None:
    assert health_exit(f"127.0.0.1:{free_port()}") == 1


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/docs" else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_http_url_is_healthy_on_2xx_only() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert health_exit(f"{base}/docs") == 0
        assert health_exit(f"{base}/missing") == 1
    finally:
        server.shutdown()
        server.server_close()
