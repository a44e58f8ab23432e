"""Device strings: `cpu:N` pins the process to core N with one torch thread (an instance = a device on CPU hosts)."""

from __future__ import annotations

import ctypes
import os

import torch

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
    """Parses `cpu`, `cpu:N` or `cuda:N` and pins this process accordingly."""
    kind, _, index = spec.partition(":")
    if kind == "cpu":
        torch.set_num_threads(1)
        if index:
            core = int(index)
            available = sorted(os.sched_getaffinity(0))
            if core >= (os.cpu_count() or 1):
                raise ValueError(f"--device cpu:{core}: this host has {os.cpu_count()} cores")
            if core in available:
                os.sched_setaffinity(0, {core})
        return torch.device("cpu")
    if kind == "cuda":
        device = torch.device(spec)
        torch.cuda.set_device(device)
        return device
    raise ValueError(f"device must be cpu, cpu:N or cuda:N, got {spec!r}")
