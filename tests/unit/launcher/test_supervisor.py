"""The supervisor restarts dead processes with a growing backoff and gives up past its budget; a taken port
is an error at start."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from services.common.net import EXCLUSIVE_PORT, bind_port
from services.launcher.stack import Proc, Stack, StackConfig
from services.launcher.supervisor import RestartPolicy, Supervisor


def _proc(stack: Stack, name: str, code: str) -> Proc:
    cmd = [sys.executable, "-c", code]
    proc = Proc(name, "", subprocess.Popen(cmd), cmd=cmd)
    stack.procs.append(proc)
    return proc


def test_a_crashing_process_is_restarted_with_backoff_until_its_budget_is_spent() -> None:
    stack = Stack(StackConfig(model="unused"))
    _proc(stack, "crasher", "raise SystemExit(3)")
    steady = _proc(stack, "steady", "import time; time.sleep(30)")
    supervisor = Supervisor(stack, RestartPolicy(first_backoff_s=0.1, max_backoff_s=0.4, budget=3, window_s=60),
                            poll_s=0.02).start()
    try:
        assert supervisor.gave_up.wait(timeout=10)
        times = [at for name, at in supervisor.restarted if name == "crasher"]
        assert len(times) == 3
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps[1] > gaps[0] >= 0.1  # at once, then after 0.1 s, then 0.2 (each after the process died)
        assert all(name == "crasher" for name, _ in supervisor.restarted)
    finally:
        supervisor.stop()
        steady.process.kill()


def test_a_process_stopped_on_purpose_stays_stopped() -> None:
    stack = Stack(StackConfig(model="unused"))
    proc = _proc(stack, "worker", "import time; time.sleep(30)")
    supervisor = Supervisor(stack, RestartPolicy(first_backoff_s=0.0), poll_s=0.02).start()
    try:
        stack.stop_instance("worker", timeout_s=5)
        time.sleep(0.3)
        assert proc.process.poll() is not None and not supervisor.restarted
    finally:
        supervisor.stop()


async def test_a_grpc_port_in_use_is_an_error() -> None:
    """Two gRPC servers with their default SO_REUSEPORT both bind one port; ours refuse."""
    first = grpc.aio.server(options=EXCLUSIVE_PORT)
    port = bind_port(first, "127.0.0.1", 0)
    await first.start()
    try:
        with pytest.raises(SystemExit, match="in use"):
            bind_port(grpc.aio.server(options=EXCLUSIVE_PORT), "127.0.0.1", port)
    finally:
        await first.stop(None)
