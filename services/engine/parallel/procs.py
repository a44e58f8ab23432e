"""Starting and stopping an instance's rank processes (ranks 1..N-1; rank 0 is the engine's own process).

A rank that cannot start fails the whole instance with its own error, and no rank is left running: the
launcher kills the others, and each rank exits when its parent does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch.distributed as dist

from services.engine.parallel.rank import RankSpec

READY_TIMEOUT_S = 300.0
_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding `services`: ranks import this same code


class RankStartError(RuntimeError):
    """A rank process died or never got ready; `rank` names it."""

    def __init__(self, rank: int, device: str, why: str) -> None:
        super().__init__(f"rank {rank} (device {device}) did not start: {why}")
        self.rank = rank


Started = list[tuple[subprocess.Popen | None, Path | None]]  # per rank 1..N-1; None: started elsewhere (compose)


def ready_key(rank: int) -> str:
    return f"ready/{rank}"


def ipc_key(rank: int) -> str:
    """Where a rank on a GPU leaves its pool's CUDA IPC handle (before it says ready) for rank 0 to register."""
    return f"ipc/{rank}"


def kvxfer_key(rank: int) -> str:
    """Where a rank started on another host (`distserve rank --kvxfer`) names that host's kvxfer, which serves its
    pool; a rank without it shares rank 0's host and kvxfer."""
    return f"kvxfer/{rank}"


def spec_key(rank: int) -> str:
    """Where rank 0 publishes a rank's RankSpec for ranks started elsewhere, which ask for it."""
    return f"spec/{rank}"


def publish_specs(store: dist.Store, specs: list[RankSpec]) -> Started:
    """Ranks started elsewhere (`distserve rank --rendezvous`) read their specs from the store."""
    for spec in specs:
        store.set(spec_key(spec.rank), json.dumps(asdict(spec)))
    return [(None, None) for _ in specs]


def spawn_ranks(specs: list[RankSpec], host: str, port: int) -> Started:
    """Starts one process per spec; each one's output goes to a log file (its tail explains a failed start)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p))
    started: Started = []
    for spec in specs:
        log = Path(tempfile.mkstemp(prefix=f"distserve-rank{spec.rank}-", suffix=".log")[1])
        arg = json.dumps({"spec": asdict(spec), "host": host, "port": port, "parent": os.getpid()})
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "services.engine.parallel.rank_main", arg],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=False)
        started.append((proc, log))
    return started


def _tail(log: Path | None, lines: int = 3) -> str:
    if log is None:  # a rank this process did not start
        return "(no output)"
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(text[-lines:]) or "(no output)"


def wait_ready(store: dist.Store, specs: list[RankSpec], started: Started, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Returns once every rank has built its part; raises RankStartError naming the first that died or hung."""
    deadline = time.monotonic() + timeout_s
    waiting = {spec.rank: (spec, proc, log) for spec, (proc, log) in zip(specs, started)}
    while waiting:
        for rank, (spec, proc, log) in list(waiting.items()):
            if store.check([ready_key(rank)]):
                del waiting[rank]
            elif proc is not None and proc.poll() is not None:
                raise RankStartError(rank, spec.device, f"exited with status {proc.returncode}: {_tail(log)}")
        if waiting and time.monotonic() > deadline:
            spec = next(iter(waiting.values()))[0]
            raise RankStartError(spec.rank, spec.device, f"not ready after {timeout_s:.0f} s")
        if waiting:
            time.sleep(0.02)


def stop_ranks(started: Started, grace_s: float = 10.0) -> None:
    """Waits for ranks told to stop, kills any still running after `grace_s`, removes the logs."""
    deadline = time.monotonic() + grace_s
    for proc, log in started:
        if proc is None or log is None:
            continue
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)


def kill_ranks(started: Started) -> None:
    for proc, _ in started:
        if proc is not None and proc.poll() is None:
            proc.kill()
    stop_ranks(started, grace_s=5.0)
