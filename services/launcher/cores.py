"""Which cores a local stack's host services (router, Redis, planner) run on.

On a CPU host each instance is pinned to its own cores (`--device cpu:N` or `cpu:a-b`), so a host service's CPU time
comes out of whichever instance's core the OS runs it on. Disaggregated, the decode cores set TPOT, an objective of a few
milliseconds a token, while the prefill cores set TTFT, which usually has slack: by default the host services run on
the prefill instances' cores. The router relays every token, so it matters most. kvxfer is left to the OS: a pull's
copy is on the hand-off's path and should not wait behind a prefill step. Colocated and chunked instances serve
both phases, so there the services run anywhere.
"""

from __future__ import annotations

import argparse
import glob
import os

from services.common.devices import cpu_cores


def parse_cores(text: str) -> tuple[int, ...] | None:
    """`auto` → None (the stack chooses), `any` → () (no pinning), `0,2` → (0, 2)."""
    if text == "auto":
        return None
    if text == "any":
        return ()
    try:
        cores = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ValueError(f"cores must be auto, any or comma-separated core numbers, got {text!r}") from None
    if any(core < 0 for core in cores):
        raise ValueError(f"core numbers are >= 0, got {text!r}")
    return cores


def cores_argument(text: str) -> tuple[int, ...] | None:
    """`parse_cores` as an argparse `type` (a bad value is reported as the flag's error)."""
    try:
        return parse_cores(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def host_service_cores(mode: str, roles: list[str], devices: list[str]) -> tuple[int, ...]:
    """The prefill instances' CPU cores when disaggregated; () (anywhere) otherwise or on GPUs."""
    if mode != "disagg":
        return ()
    cores: set[int] = set()
    for role, device in zip(roles, devices):
        if role == "prefill" and device.startswith("cpu"):
            cores.update(cpu_cores(device))
    return tuple(sorted(cores))


def pin_process(pid: int, cores: tuple[int, ...]) -> None:
    """Pins every thread of a running process (one that is not ours to start pinned, such as redis-server)."""
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            os.sched_setaffinity(int(os.path.basename(task)), cores)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
