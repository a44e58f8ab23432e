"""A real Prometheus (Debian's `prometheus`) scrapes `distserve up` with the scrape config the deployment files
use, and after some traffic every query of the Grafana dashboard returns data."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from services.common.net import free_port
from services.deploy.observability import PANELS, scrape_config
from tests.e2e.helpers import read_until_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
KEY = "sk-distserve-prometheus"
# the planner refits the latency model and the router re-reads it often, so predictions start within seconds
FAST_FIT = {"DISTSERVE_PLANNER_FIT_INTERVAL": "0.5", "DISTSERVE_ROUTER_MODEL_REFRESH_S": "0.5"}


def targets(lines: list[str]) -> dict[str, list[str]]:
    """Each component's metrics endpoints, from the lines `up` prints (the planner's on its REST port)."""
    found: dict[str, list[str]] = {}
    for line in lines:
        metrics = re.search(r"^\s+(\w+)\S*\s.*metrics http://([\d.:]+)/metrics", line)
        planner = re.search(r"^\s+planner http://([\d.:]+)/docs", line)
        if metrics:
            found.setdefault(metrics.group(1), []).append(metrics.group(2))
        elif planner:
            found["planner"] = [planner.group(1)]
    return found


def _serve(http: httpx.Client, words: int, slo_ms: str) -> None:
    body = {"model": "", "prompt": "watch " * words, "max_tokens": 6, "temperature": 0.0}
    reply = http.post("/v1/completions", json=body, headers={"x-slo-ttft-ms": slo_ms, "x-slo-tpot-ms": slo_ms})
    assert reply.status_code == 200, reply.text


def _empty_queries(prometheus: str) -> list[str]:
    empty = []
    for panel in PANELS:
        for legend, expr in panel.targets:
            reply = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
            assert reply["status"] == "success", (expr, reply)
            if not reply["data"]["result"]:
                empty.append(f"{panel.title} / {legend}: {expr}")
    return empty


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="no prometheus binary (apt-get install prometheus)")
def test_every_dashboard_query_returns_data_after_some_traffic(tiny_llama_dir: str, tmp_path: Path) -> None:
    http_port, planner_port, prom_port = free_port(), free_port(), free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "services", "--log-level", "WARNING", "up", "--model", tiny_llama_dir, "--mode", "disagg",
         "--prefill", "1", "--decode", "1", "--devices", "cpu:0,cpu:1", "--grpc-port", str(free_port()),
         "--http-port", str(http_port), "--planner-port", str(planner_port), "--num-blocks", "128",
         "--max-batch-tokens", "128"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "DISTSERVE_ROUTER_API_KEY": KEY, **FAST_FIT})
    prometheus = None
    try:
        found = targets(read_until_ready(up, 180))
        assert sorted(found) == ["decode", "kvxfer", "planner", "prefill", "router"]
        config = scrape_config(found, interval="1s")
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{prom_port}"
        with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=60,
                          headers={"Authorization": f"Bearer {KEY}"}) as http:
            deadline, empty = time.monotonic() + 120, ["not queried yet"]
            while empty and time.monotonic() < deadline:
                for words in (3, 10, 25, 40):  # prompts of several lengths: the planner fits prefill to them
                    _serve(http, words, "600000")
                _serve(http, 5, "1")  # an objective missed: attainment below 1, and both outcomes counted
                try:
                    empty = _empty_queries(url)
                except httpx.TransportError:  # Prometheus still starting
                    continue
        assert not empty, "queries without data:\n" + "\n".join(empty)
        up_targets = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        assert {t["health"] for t in up_targets} == {"up"} and len(up_targets) == 5
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
