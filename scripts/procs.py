"""A started stack's processes as /proc shows them, for the diagnostic scripts beside this one."""

from __future__ import annotations

import glob
import os

ROLES = ("prefill", "decode", "router", "kvxfer")
TICK = os.sysconf("SC_CLK_TCK")


def stack_pids(redis_port: str) -> dict[str, int]:
    """The stack's processes by role, from their command lines (redis-server names its port in its title)."""
    found: dict[str, int] = {}
    for folder in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{folder}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            continue
        role = "redis" if "redis-server" in argv[0] and argv[0].endswith(f":{redis_port}") else next(
            (a for a in argv if a in ROLES), "")
        if role and (role == "redis" or "services" in argv):
            found.setdefault(role, int(os.path.basename(folder)))
    return found


def thread_cpu(pid: int) -> dict[str, float]:
    """User + system seconds of each thread of a process, by thread id."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(task) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[task.split("/")[4]] = (int(fields[11]) + int(fields[12])) / TICK
    return out
