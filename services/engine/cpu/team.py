"""The instance's threads: torch's intra-op pool and the C kernels' teams are one OpenMP pool of one size (team.h)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from services.common.cbuild import kernel_function

HERE = Path(__file__).parent  # the .c sources
OPENMP = ("-fopenmp",)  # links libgomp.so.1: torch's, loaded before any kernel (this module imports torch)
KERNELS = ("small_gemm", "paged_attention")


def set_team(threads: int, cores: tuple[int, ...] = ()) -> None:
    """Runs torch's ops and the C kernels on `threads` threads; with `cores`, a kernel's worker i >= 1 is pinned to
    cores[i] (the calling thread keeps the process's cores)."""
    torch.set_num_threads(threads)
    pinned = (ctypes.c_int * len(cores))(*cores)
    for name in KERNELS:
        fn = kernel_function(name, "team_set", (ctypes.c_int, ctypes.c_void_p, ctypes.c_int), None, HERE, OPENMP)
        if fn is not None:
            fn(threads, pinned, len(cores))
