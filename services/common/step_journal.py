"""Which requests were in the step an instance died in: the instance writes the ids of each batch to a small
file before running it and empties it after; whoever watches the process reads it after the death.

A request whose step crashed the process (a segfault or abort in a kernel) would crash any instance it is
retried on, so the router fails it with INTERNAL instead (the launcher's supervisor publishes them: registry.CRASH_KEY); the requests that were
not in that step are retried as usual. The file lives in this user's private pool directory, named by
instance id, so a restarted instance writes the same file.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from services.common.pool_files import ensure_pool_dir, pool_dir

PREFIX = "distserve-journal-"
# Deaths that come from outside the process (an operator, the launcher, the OOM killer): no request is blamed.
EXTERNAL_DEATHS = frozenset({0, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT})


def journal_path(instance_id: str) -> Path:
    return pool_dir() / f"{PREFIX}{instance_id}"


class StepJournal:
    """The writer's side: one process (incarnation) of an instance, one file rewritten in place at each step."""

    def __init__(self, instance_id: str, incarnation: str) -> None:
        ensure_pool_dir()
        self.path = journal_path(instance_id)
        self._header = incarnation.encode() + b"\n"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.clear()

    def begin(self, request_ids: list[str]) -> None:
        """Before a step runs: its batch."""
        self._write(self._header + "\n".join(request_ids).encode())

    def clear(self) -> None:
        """After a step returned (or raised: the process lives, the step guard answers for it)."""
        self._write(self._header)

    def _write(self, data: bytes) -> None:
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))

    def close(self) -> None:
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


def read_fatal_step(instance_id: str, returncode: int) -> tuple[str, list[str]] | None:
    """(incarnation, ids of the step it died in) of a dead instance process, or None when it kept no journal.
    A death from outside blames no request."""
    path = journal_path(instance_id)
    try:
        lines = path.read_text().split("\n")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    path.unlink(missing_ok=True)
    incarnation, ids = lines[0], [i for i in lines[1:] if i]
    return incarnation, ([] if returncode in EXTERNAL_DEATHS else ids)
