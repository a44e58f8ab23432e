"""`--auth-compare` of bench-xfer and bench-router: the same figures with the deployment's authentication off
and on, in one run (off first, then on), and what authentication costs."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from services.bench.xfer import Row
from services.common.secret import SECRET_ENV, ensure_secret


@contextmanager
def deployment_auth(on: bool) -> Iterator[None]:
    """This process and the processes it starts run with a fresh deployment secret (on) or none (off)."""
    before = os.environ.get(SECRET_ENV)
    with tempfile.TemporaryDirectory(prefix="distserve-auth-") as folder:
        os.environ[SECRET_ENV] = str(ensure_secret(Path(folder) / "secret")) if on else ""
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(SECRET_ENV)
            else:
                os.environ[SECRET_ENV] = before


def compare_xfer(quick: bool, device: str) -> int:
    """Each half in its own process: UCX initializes once per process."""
    runs = {}
    for on in (False, True):
        with deployment_auth(on):
            command = [sys.executable, "-m", "services", "bench-xfer", "--json", "--device", device]
            done = subprocess.run(command + (["--quick"] if quick else []), stdout=subprocess.PIPE, check=True)
        runs[on] = [Row(**row) for row in json.loads(done.stdout)]
    table = Table(title="bench-xfer, authentication off vs on (token on every gRPC call, owner checks, UCX hello)")
    for name in ("path", "blocks", "size", "ratio off", "ratio on", "GB/s off", "GB/s on", "on/off",
                 "e2e ms off", "e2e ms on", "e2e on/off"):
        table.add_column(name, justify="left" if name in ("path", "blocks") else "right", no_wrap=True)
    for off, on in zip(runs[False], runs[True]):
        size = f"{off.bytes / (1 << 20):g} MB" if off.bytes >= 1 << 20 else f"{off.bytes >> 10} KB"
        table.add_row(off.path, off.blocks_layout, size, f"{off.ratio:.2f}", f"{on.ratio:.2f}", f"{off.gbps:.2f}",
                      f"{on.gbps:.2f}", f"{on.gbps / off.gbps:.3f}", f"{off.e2e_ms:.2f}", f"{on.e2e_ms:.2f}",
                      f"{on.e2e_ms / off.e2e_ms:.3f}")
    console = Console(width=140)
    console.print(table)
    off_us, on_us = asyncio.run(_rpc_cost())
    console.print(f"one unary kvxfer RPC (Stats), median of interleaved batches: {off_us:.0f} us off, {on_us:.0f} us "
                  f"on: authentication adds {on_us - off_us:.0f} us per call ({on_us / off_us:.3f}x)")
    return 0


async def _rpc_cost(batches: int = 20, calls: int = 100) -> tuple[float, float]:
    """Microseconds per Stats call on a kvxfer without and one with authentication, in alternating batches."""
    from services.kvxfer.client import KVXferClient
    from services.kvxfer.local import start_local_kvxfer

    hosts, clients, seconds = [], [], {False: [], True: []}
    try:
        for on in (False, True):
            with deployment_auth(on):
                hosts.append(await start_local_kvxfer(quiet=True))
                clients.append(KVXferClient(hosts[-1].address))
        for client in clients:
            await client.stats()  # connect
        for _ in range(batches):
            for on, client in zip((False, True), clients):
                start = time.perf_counter()
                for _ in range(calls):
                    await client.stats()
                seconds[on].append((time.perf_counter() - start) / calls)
    finally:
        for client in clients:
            await client.close()
        for host in hosts:
            host.stop()
    return 1e6 * statistics.median(seconds[False]), 1e6 * statistics.median(seconds[True])


def compare_router(model: str, requests: int, tokens: int, streams: int) -> int:
    from services.bench.router import measure_stack

    figures = {on: measure_stack(model, requests, tokens, streams, {} if on else {SECRET_ENV: ""}) for on in (False, True)}
    table = Table(title=f"bench-router, authentication off vs on ({requests} requests x {tokens} tokens)")
    for name in ("figure", "off", "on", "on/off"):
        table.add_column(name, justify="right")
    for name, off in asdict(figures[False]).items():
        on = asdict(figures[True])[name]
        ratio = f"{on / off:.3f}" if isinstance(off, float) and off else ""
        table.add_row(name, f"{off:.3f}" if isinstance(off, float) else str(off),
                      f"{on:.3f}" if isinstance(on, float) else str(on), ratio)
    Console(width=120).print(table)
    return 0
