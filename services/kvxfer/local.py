"""Starts kvxfer processes, each standing in for one host (bench-xfer and the tests): on loopback,
or inside a network namespace (tests/integration/kvxfer/netns.py)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from services.common.net import free_port
from services.kvxfer.client import KVXferClient

ROOT = Path(__file__).resolve().parents[2]


@dataclass(slots=True)
class LocalKVXfer:
    address: str
    proc: subprocess.Popen

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within timeout_s."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


def spawn_kvxfer(*flags: str, host: str = "127.0.0.1", netns: str | None = None,
                 quiet: bool = False) -> LocalKVXfer:
    """A `distserve kvxfer` process serving on host (inside network namespace netns if given), not
    yet ready. The port is free on loopback here, and so in a fresh namespace too."""
    port = free_port()
    prefix = ["ip", "netns", "exec", netns] if netns else []  # ip execs the command: proc is kvxfer itself
    cmd = [*prefix, sys.executable, "-m", "services.kvxfer", "--host", host, "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL if quiet else None)
    return LocalKVXfer(f"{host}:{port}", proc)


async def start_local_kvxfer(*flags: str, quiet: bool = False) -> LocalKVXfer:
    """A `distserve kvxfer` process on 127.0.0.1 and a free port, returned once it serves."""
    kvxfer = spawn_kvxfer(*flags, quiet=quiet)
    client = KVXferClient(kvxfer.address)
    try:
        await client.wait_ready()
    except BaseException:
        kvxfer.stop()
        raise
    finally:
        await client.close()
    return kvxfer
