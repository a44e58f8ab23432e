"""`distserve up --replan-profile`: the replanning loop plans from the recorded workload and the stack's
instances follow the plan. The stack starts prefill-heavy on three devices and serves a decode-heavy workload,
so the plan differs from the starting placement and the test fails unless the actuator changed the stack."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import redis

from services.launcher.autoscale import start_autoscaler
from services.launcher.stack_actuator import StackActuator
from services.planner.schemas import SLOBody
from tests.e2e.helpers import generate, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(400)]


def _wait(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_stack_follows_the_replanned_placement(tiny_llama_dir: str, redis_url: str, tmp_path) -> None:
    profile = tmp_path / "profile.json"
    subprocess.run([sys.executable, "-m", "services", "profile", "--model", tiny_llama_dir, "--device", "cpu:0",
                    "--out", str(profile), "--max-tokens", "256", "--repeats", "1"], check=True, timeout=300,
                   capture_output=True)
    start = {"prefill": 2, "decode": 1}
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", devices=("cpu:0", "cpu:1", "cpu:1"),
                       **start) as stack:
        stop = threading.Event()
        thread = start_autoscaler(stack, str(profile), SLOBody(ttft=0.5, tpot=0.05, attainment=0.9), 1.0, stop)
        try:
            async def load() -> None:  # short prompts, long outputs
                for i in range(0, 60, 10):
                    await asyncio.gather(*(generate(stack.router_address, "w " * (2 + j % 3), max_tokens=48,
                                                    ignore_eos=True, temperature=0.0) for j in range(i, i + 10)))
            asyncio.run(load())
            client = redis.Redis.from_url(stack.redis_url)
            _wait(lambda: client.get("ds:plan") is not None, 120)
            plan = json.loads(client.get("ds:plan"))
            want = {"prefill": plan["prefill"]["replicas"], "decode": plan["decode"]["replicas"]}
            assert want != start, plan  # else the check below would hold before anything happened
            actuator = StackActuator(stack)
            _wait(lambda: Counter(r.spec.role for r in actuator.running()) == want, 120)
            responses = asyncio.run(generate(stack.router_address, "after replanning", max_tokens=4,
                                             temperature=0.0, ignore_eos=True))
            assert sum(len(r.token_ids) for r in responses) == 4
        finally:
            stop.set()
            thread.join(timeout=60)
