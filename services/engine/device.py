"""Device strings: `cpu:N` pins the process to core N with one torch thread (an instance = a device on CPU hosts)."""

from __future__ import annotations

import os

import torch


def setup_device(spec: str) -> torch.device:
    """Parses `cpu`, `cpu:N` or `cuda:N` and pins this process accordingly."""
    kind, _, index = spec.partition(":")
    if kind == "cpu":
        torch.set_num_threads(1)
        if index:
            core = int(index)
            available = sorted(os.sched_getaffinity(0))
            if core >= os.cpu_count():
                raise ValueError(f"--device cpu:{core}: this host has {os.cpu_count()} cores")
            if core in available:
                os.sched_setaffinity(0, {core})
        return torch.device("cpu")
    if kind == "cuda":
        device = torch.device(spec)
        torch.cuda.set_device(device)
        return device
    raise ValueError(f"device must be cpu, cpu:N or cuda:N, got {spec!r}")
