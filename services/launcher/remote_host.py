"""How a local stack runs a process on its second host (the decode host: tests' second node): inside that host's
network namespace, with that host's own /dev/shm and environment."""

from __future__ import annotations

import shlex
from collections.abc import Mapping


def remote_entry(netns: str, shm_dir: str, env: Mapping[str, str]) -> list[str]:
    """The command prefix: `ip netns exec` (where a namespace is given), then a mount namespace of its own in
    which `shm_dir` is its /dev/shm (where given: the processes of one host share that folder, those of the
    other host cannot see it), then `env`. Each step execs the next: the process keeps the pid it was started
    with."""
    enter = ["ip", "netns", "exec", netns] if netns else []
    settings = [f"{k}={v}" for k, v in env.items()]
    if not shm_dir:
        return [*enter, *(["env", *settings] if settings else [])]
    script = f'mount --bind "$0" /dev/shm && exec env {shlex.join(settings)} "$@"'
    return [*enter, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, shm_dir]
