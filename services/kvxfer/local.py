"""Starts kvxfer processes on loopback, each standing in for one host (bench-xfer and the tests)."""

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


async def start_local_kvxfer(*flags: str, quiet: bool = False) -> LocalKVXfer:
    """A `distserve kvxfer` process on 127.0.0.1 and a free port, returned once it serves."""
    port = free_port()
    cmd = [sys.executable, "-m", "services.kvxfer", "--host", "127.0.0.1", "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL if quiet else None)
    kvxfer = LocalKVXfer(f"127.0.0.1:{port}", proc)
    client = KVXferClient(kvxfer.address)
    try:
        await client.wait_ready()
    except BaseException:
        kvxfer.stop()
        raise
    finally:
        await client.close()
    return kvxfer
