"""Where a worker's KV pool file lives on a CPU host, how kvxfer maps one, and the cleanup after a dead worker.

A worker unlinks its pool file when it stops; one that is killed (SIGKILL, OOM) cannot, so the launcher
removes what is left under the worker's instance id once the process has exited. kvxfer maps only pool
files: regular files of this user directly in /dev/shm named by `shm_path`, opened without following links.
"""

from __future__ import annotations

import mmap
import os
import stat
import uuid
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
PREFIX = "distserve-kv-"


def shm_path(instance_id: str) -> str:
    """A fresh /dev/shm file name for one worker's pool."""
    return str(SHM_DIR / f"{PREFIX}{instance_id}-{uuid.uuid4().hex[:8]}")


def map_pool_file(path: str, size: int) -> np.ndarray:
    """Maps a worker's pool file read-write as [size] uint8; ValueError unless it is a pool file of `size` bytes."""
    name = os.path.basename(path)
    if os.path.dirname(path) != str(SHM_DIR) or not name.startswith(PREFIX) or name in (".", ".."):
        raise ValueError(f"pool file {path!r} is not a {SHM_DIR}/{PREFIX}* file")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"pool file {path!r} cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ValueError(f"pool file {path!r} is not a regular file of this user")
        if st.st_size != size:
            raise ValueError(f"pool file {path} has {st.st_size} bytes, layout needs {size}")
        return np.frombuffer(mmap.mmap(fd, size), dtype=np.uint8)
    finally:
        os.close(fd)


def remove_pool_files(instance_id: str) -> list[str]:
    """Unlinks every pool file of `instance_id` (call once its process has exited); returns what it removed."""
    removed = []
    for path in SHM_DIR.glob(f"{PREFIX}{instance_id}-*"):
        path.unlink(missing_ok=True)
        removed.append(str(path))
    return removed
