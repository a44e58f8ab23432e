"""Where a local stack's host services run: the cores chosen, the flag's parsing, and real pinning."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from services.launcher.cores import host_service_cores, parse_cores, pin_process
from services.launcher.stack import Stack, StackConfig


@pytest.mark.parametrize("text, cores", [("auto", None), ("any", ()), ("1,0,1", (0, 1)), ("3", (3,))])
def test_parse_cores(text: str, cores: tuple[int, ...] | None) -> None:
    assert parse_cores(text) == cores


@pytest.mark.parametrize("text", ["", "a", "0,x", "-1"])
def test_parse_cores_refuses_what_is_not_a_core_list(text: str) -> None:
    with pytest.raises(ValueError, match="core"):
        parse_cores(text)


def test_disaggregated_services_go_to_the_prefill_cores() -> None:
    roles = ["prefill", "prefill", "decode", "decode"]
    assert host_service_cores("disagg", roles, ["cpu:0", "cpu:2", "cpu:1", "cpu:3"]) == (0, 2)


@pytest.mark.parametrize("mode, devices", [("colocated", ["cpu:0", "cpu:1"]), ("chunked", ["cpu:0", "cpu:1"]),
                                           ("disagg", ["cuda:0", "cuda:1"]), ("disagg", ["cpu", "cpu"])])
def test_services_run_anywhere_without_prefill_cores(mode: str, devices: list[str]) -> None:
    roles = ["prefill", "decode"] if mode == "disagg" else [mode, mode]
    assert host_service_cores(mode, roles, devices) == ()


def test_a_stack_uses_its_configured_cores_over_the_default() -> None:
    default = Stack(StackConfig(model="m", devices=("cpu:1", "cpu:0")))
    assert default.service_cores == (1,)
    assert Stack(StackConfig(model="m", devices=("cpu:1", "cpu:0"), service_cores=())).service_cores == ()
    assert Stack(StackConfig(model="m", mode="colocated", devices=("cpu:0", "cpu:1"))).service_cores == ()


def test_pin_process_pins_every_thread_of_a_running_process() -> None:
    script = "import threading, time; [threading.Thread(target=time.sleep, args=(30,)).start() for _ in range(3)]; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        tasks = f"/proc/{child.pid}/task"
        deadline = time.monotonic() + 30
        while len(os.listdir(tasks)) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        core = min(os.sched_getaffinity(0))
        pin_process(child.pid, (core,))
        assert all(os.sched_getaffinity(int(tid)) == {core} for tid in os.listdir(tasks))
    finally:
        child.kill()
        child.wait()


def test_the_cores_flag_refuses_what_is_not_a_core_list() -> None:
    bad = subprocess.run([sys.executable, "-m", "services", "--cores", "0,x", "health", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--cores 0,x" in bad.stderr


def test_the_cores_flag_skips_cores_this_process_may_not_use() -> None:
    unusable = max(os.sched_getaffinity(0)) + 1000
    out = subprocess.run([sys.executable, "-m", "services", "--cores", str(unusable), "health", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "not pinned" in out.stderr  # health's own answer: nothing serves there
