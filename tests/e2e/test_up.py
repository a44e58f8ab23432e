"""`distserve up` as a user runs it: its flags, a client API key from the environment (gRPC and HTTP), the
planner it starts, and Ctrl-C (SIGINT) stopping every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx
import psutil
import pytest

from services.common.net import free_port
from tests.e2e.helpers import generate, read_until_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
KEY = "sk-distserve-test"


@dataclass
class Up:
    process: subprocess.Popen
    grpc: str
    http: str
    planner: str
    lines: list[str]


@pytest.fixture(scope="module")
def up(tiny_llama_dir: str) -> Iterator[Up]:
    grpc_port, http_port, planner_port = free_port(), free_port(), free_port()
    cmd = [sys.executable, "-m", "services", "--log-level", "WARNING", "up", "--model", tiny_llama_dir,
           "--mode", "disagg", "--prefill", "1", "--decode", "1", "--devices", "cpu:0,cpu:1",
           "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--planner-port", str(planner_port),
           "--num-blocks", "128", "--max-batch-tokens", "128"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "DISTSERVE_ROUTER_API_KEY": KEY})
    try:
        lines = read_until_ready(process, 180)
        yield Up(process, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}",
                 f"http://127.0.0.1:{planner_port}", lines)
    finally:
        if process.poll() is None:  # a test failed before Ctrl-C: stop it the same way
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)


def test_up_prints_where_each_service_listens(up: Up) -> None:
    text = "\n".join(up.lines)
    assert f"gRPC   {up.grpc}" in text and f"{up.http}/v1" in text and f"planner {up.planner}/docs" in text
    roles = [line.split()[0].split("-")[0] for line in up.lines if line.startswith("  ") and "metrics" in line]
    assert sorted(roles) == ["decode", "kvxfer", "prefill", "router"]


async def test_grpc_serves_only_with_the_api_key(up: Up) -> None:
    for key in ("", "sk-wrong"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await generate(up.grpc, "no key", api_key=key, max_tokens=2)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    responses = await generate(up.grpc, "with the key", api_key=KEY, max_tokens=3, ignore_eos=True, temperature=0.0)
    assert sum(len(r.token_ids) for r in responses) == 3


def test_http_serves_only_with_the_api_key(up: Up) -> None:
    body = {"model": "", "prompt": "over http", "max_tokens": 3, "temperature": 0.0}
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        refused = httpx.post(f"{up.http}/v1/completions", json=body, headers=headers, timeout=60)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    ok = httpx.post(f"{up.http}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(f"{up.http}/health", timeout=10).status_code == 200  # probes need no key


def test_the_planner_it_starts_reads_the_stacks_requests(up: Up) -> None:
    assert httpx.get(f"{up.planner}/healthz", timeout=10).json() == {"status": "ok"}
    workload = httpx.get(f"{up.planner}/v1/workload", timeout=30)
    assert workload.status_code == 200, workload.text
    assert workload.json()["count"] >= 2  # the keyed gRPC and HTTP requests above, from the stack's Redis


def test_ctrl_c_stops_every_process_it_started(up: Up) -> None:
    """Runs last in this module."""
    children = psutil.Process(up.process.pid).children(recursive=True)
    assert len(children) >= 6  # redis-server, kvxfer, prefill, decode, router, planner
    up.process.send_signal(signal.SIGINT)
    assert up.process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{up.http}/health", timeout=5)
