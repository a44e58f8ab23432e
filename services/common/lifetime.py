"""Children that do not outlive their parent: Linux's parent-death signal.

A forked child of a threaded parent (gRPC's and torch's threads) may run no Python before exec (a
`preexec_fn` crashes there), so a distserve child sets the signal itself as it starts (`follow_parent`,
told its parent's pid through the environment), and another program is started through this module,
which does the same and then execs it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PARENT_ENV = "DISTSERVE_PARENT_PID"
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def child_env() -> dict[str, str]:
    """The environment entry that makes a distserve child end with this process."""
    return {PARENT_ENV: str(os.getpid())}


def follow_parent(sig: int = signal.SIGTERM) -> None:
    """At a distserve process's start: end with the parent named in the environment (if any); a parent already
    gone means ending now."""
    parent = os.environ.pop(PARENT_ENV, "")
    if not parent or _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != int(parent):
        os.kill(os.getpid(), sig)


def exec_following_parent(argv: list[str]) -> list[str]:
    """The command line that runs `argv` (a program that is not distserve's) so it ends with this process: a
    small Python step sets the signal, then becomes `argv` (the signal survives exec). Give it `child_env()`."""
    return [sys.executable, "-m", "services.common.lifetime", *argv]


if __name__ == "__main__":
    follow_parent()
    os.execvp(sys.argv[1], sys.argv[1:])
