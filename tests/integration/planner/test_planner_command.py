"""`distserve planner` serves the REST API as its own process."""

import subprocess
import sys
import time

import httpx

from services.common.net import free_port


def test_planner_command_serves_openapi_and_plans(redis_url, rds):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "services", "planner", "--port", str(port), "--redis-url",
                             redis_url.rsplit("/", 1)[0] + "/7", "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/docs", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "planner did not come up"
                time.sleep(0.1)
        body = {"model": "opt-13b", "workload": {"input_len": 512, "output_len": 64}, "num_requests": 200,
                "cluster": {"nodes": 1, "gpus_per_node": 2}}
        plan = httpx.post(f"{base}/v1/plan", json=body, timeout=60).json()
        assert plan["num_gpus"] <= 2 and plan["goodput_per_gpu"] > 0
        assert httpx.get(f"{base}/v1/plan", timeout=5).json() == plan
        assert rds.get("ds:plan")  # stored where replanning and `distserve up` find it
    finally:
        proc.terminate()
        proc.wait(timeout=10)
