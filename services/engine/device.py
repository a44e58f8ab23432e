"""Device strings: `cpu:N` pins the process to core N with one thread (an instance = a device on CPU hosts); `cpu:a-b`
or `cpu:a,b` to those cores with a thread on each (torch's ops, MKL and the C kernels share one pool)."""

from __future__ import annotations

import ctypes
import os

import torch

from services.common.devices import cpu_cores
from services.engine.cpu.team import set_team

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> None:
    """Keeps glibc from handing big freed buffers back to the kernel after every op.

    A step's temporaries (activations, gathered K/V) are hundreds of kB to MBs; by default glibc maps each
    afresh and unmaps it on free, so every step pays page faults and zeroing: slower than the math itself.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return  # not glibc: its allocator has its own policy
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's maximum
    libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)


def setup_device(spec: str) -> torch.device:
    """Parses `cpu`, `cpu:N`, `cpu:a-b`, `cpu:a,b` or `cuda:N` and pins this process accordingly."""
    kind, _, _ = spec.partition(":")
    if kind == "cpu":
        cores = cpu_cores(spec)
        host = os.cpu_count() or 1
        if any(core >= host for core in cores):
            raise ValueError(f"--device {spec}: this host has {host} cores")
        usable = set(cores) & os.sched_getaffinity(0)  # a core this process may not use (a cpuset) is left out
        if usable:
            os.sched_setaffinity(0, usable)
        set_team(max(len(usable), 1), tuple(sorted(usable)) if len(usable) > 1 else ())
        return torch.device("cpu")
    if kind == "cuda":
        device = torch.device(spec)
        torch.cuda.set_device(device)
        return device
    raise ValueError(f"device must be cpu, cpu:N, cpu:a-b, cpu:a,b or cuda:N, got {spec!r}")
