"""Where a worker's KV pool file lives on a CPU host, how kvxfer maps one, and the cleanup after a dead worker.

A worker unlinks its pool file when it stops; one that is killed (SIGKILL, OOM) cannot, so the launcher
removes what is left under the worker's instance id once the process has exited. Pool files live in this
user's own directory, /dev/shm/distserve-<uid> (0700; files 0600), and kvxfer maps only pool files: regular
files of this user directly in that directory, named by `shm_path`, opened without following links (neither
the directory nor the file may be a symlink).
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


def pool_dir() -> Path:
    return SHM_DIR / f"distserve-{os.geteuid()}"


def ensure_pool_dir() -> None:
    """This user's pool directory, made 0700 if missing; ValueError where another user could swap files in it."""
    pool_dir().mkdir(mode=0o700, exist_ok=True)
    check_pool_dir()  # refuse such a directory now rather than at mapping


def shm_path(instance_id: str) -> str:
    """A fresh file name for one worker's pool, in this user's pool directory (made 0700 if missing)."""
    ensure_pool_dir()
    return str(pool_dir() / f"{PREFIX}{instance_id}-{uuid.uuid4().hex[:8]}")


def create_pool_file(path: str) -> None:
    """Creates the pool file 0600 if missing, not following a link (the engine then sizes and maps it); its
    directory too when it is the pool directory (a rank on another host than the rank 0 that named the file)."""
    if Path(path).parent == pool_dir():
        ensure_pool_dir()
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def check_pool_dir() -> None:
    """ValueError unless the pool directory is a directory (not a link) of this user, mode 0700."""
    os.close(_open_pool_dir())


def _open_pool_dir() -> int:
    """A descriptor of the pool directory; ValueError unless it is a directory (not a link) of this user, 0700."""
    try:
        fd = os.open(pool_dir(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"pool directory {pool_dir()} cannot be opened: {exc.strerror}") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise ValueError(f"pool directory {pool_dir()} must belong to this user with mode 0700")
    return fd


def map_pool_file(path: str, size: int) -> np.ndarray:
    """Maps a worker's pool file read-write as [size] uint8; ValueError unless it is a pool file of `size` bytes."""
    name = os.path.basename(path)
    if os.path.dirname(path) != str(pool_dir()) or not name.startswith(PREFIX):
        raise ValueError(f"pool file {path!r} is not a {pool_dir()}/{PREFIX}* file")
    dir_fd = _open_pool_dir()
    try:
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise ValueError(f"pool file {path!r} cannot be opened: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
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
    for path in pool_dir().glob(f"{PREFIX}{instance_id}-*"):
        path.unlink(missing_ok=True)
        removed.append(str(path))
    return removed
