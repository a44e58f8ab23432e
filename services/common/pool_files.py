"""Where a worker's KV pool file lives on a CPU host, and the supervisor's cleanup after a worker that died.

A worker unlinks its pool file when it stops; one that is killed (SIGKILL, OOM) cannot, so the launcher
removes what is left under the worker's instance id once the process has exited.
"""

from __future__ import annotations

import uuid
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "distserve-kv-"


def shm_path(instance_id: str) -> str:
    """A fresh /dev/shm file name for one worker's pool."""
    return str(SHM_DIR / f"{PREFIX}{instance_id}-{uuid.uuid4().hex[:8]}")


def remove_pool_files(instance_id: str) -> list[str]:
    """Unlinks every pool file of `instance_id` (call once its process has exited); returns what it removed."""
    removed = []
    for path in SHM_DIR.glob(f"{PREFIX}{instance_id}-*"):
        path.unlink(missing_ok=True)
        removed.append(str(path))
    return removed
