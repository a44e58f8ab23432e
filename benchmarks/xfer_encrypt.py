"""`python -m benchmarks.xfer_encrypt`: cross-host pulls with KV encryption off and on, in one run.

Two pairs of kvxfer processes ("hosts" on loopback, UCX over TCP), one pair started with `--encrypt-kv`, both
with the same deployment secret (authentication on in both: encryption is the only difference), the same source
and destination pools registered with both. Each round pulls the same blocks through both pairs, in alternating
order, so both see the same machine load. GB/s from kvxfer's own timing, e2e the Pull RPC's wall time, medians
over the rounds; on/off is the ratio of the median pull times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from services.bench.xfer import LAYOUT, MB, timed_pull
from services.common.auth import instance_principal
from services.common.pool_files import shm_path
from services.common.secret import SECRET_ENV, ensure_secret
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import LocalKVXfer, start_local_kvxfer

SIZES, QUICK_SIZES = (MB, 4 * MB, 16 * MB, 64 * MB), (MB, 16 * MB)
WORLDS = ("off", "on")


@dataclass(frozen=True, slots=True)
class Row:
    blocks_layout: str  # "random" | "contiguous"
    bytes: int
    rounds: int
    off_gbps: float
    on_gbps: float
    off_e2e_ms: float
    on_e2e_ms: float
    on_off: float  # median pull time with encryption over without


@contextlib.contextmanager
def _deployment_secret() -> Iterator[None]:
    """DISTSERVE_SECRET_FILE as given, else a fresh secret for this run (the key of encryption derives from it)."""
    if os.environ.get(SECRET_ENV):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="distserve-bench-") as folder:
        os.environ[SECRET_ENV] = str(ensure_secret(Path(folder) / "secret"))
        try:
            yield
        finally:
            del os.environ[SECRET_ENV]


async def _bench(quick: bool, say) -> list[Row]:
    pools = [KVPool(LAYOUT, torch.device("cpu"), shm_path(name)) for name in ("bench-enc-p0", "bench-enc-d1")]
    hosts: list[LocalKVXfer] = []
    worlds: dict[str, tuple[KVXferClient, KVXferClient]] = {}
    try:
        for pool in pools:  # touch every page, as a serving pool's pages are
            pool.tensor.view(-1).copy_(torch.rand(LAYOUT.pool_bytes // LAYOUT.itemsize))
        say("starting two pairs of kvxfer services (two hosts on loopback each), one pair with --encrypt-kv")
        for world in WORLDS:
            flags = ("--encrypt-kv", "true") if world == "on" else ()
            pair = [await start_local_kvxfer(*flags, quiet=True) for _ in range(2)]
            hosts += pair
            a, b = KVXferClient(pair[0].address, instance_principal("p0")), KVXferClient(pair[1].address,
                                                                                          instance_principal("d1"))
            worlds[world] = a, b
            await a.register_pool("p0", pools[0].site)
            await b.register_pool("d1", pools[1].site)
            for nblocks, contiguous in ((4, False), (512, False), (512, True)):  # connections, staging, UCX warm
                await timed_pull(a, b, "d1", nblocks, contiguous, random.Random(0))
        rows = []
        for nbytes, contiguous in [(n, c) for n in (QUICK_SIZES if quick else SIZES) for c in (False, True)]:
            rounds = max(3, min(10, 16 * MB // nbytes)) if quick else max(8, min(30, 256 * MB // nbytes))
            say(f"{nbytes / MB:g} MB x {rounds}, {'contiguous' if contiguous else 'random'} blocks")
            times: dict[str, tuple[list[float], list[float]]] = {w: ([], []) for w in WORLDS}
            for i in range(rounds):
                for world in WORLDS if i % 2 == 0 else WORLDS[::-1]:
                    service, e2e = await timed_pull(*worlds[world], "d1", nbytes // LAYOUT.block_bytes, contiguous,
                                               random.Random(i))  # the same blocks in both worlds
                    times[world][0].append(service)
                    times[world][1].append(e2e)
            off, on = (statistics.median(times[w][0]) for w in WORLDS)
            rows.append(Row("contiguous" if contiguous else "random", nbytes, rounds, round(nbytes / off / 1e9, 3),
                            round(nbytes / on / 1e9, 3), *(round(statistics.median(times[w][1]) * 1e3, 3) for w in WORLDS),
                            round(on / off, 3)))
        return rows
    finally:
        for a, b in worlds.values():
            await a.close()
            await b.close()
        for host in hosts:
            host.stop()
        for pool in pools:
            pool.close()


def run_encrypt_bench(as_json: bool, quick: bool) -> int:
    """Print the rows (JSON on stdout with --json, the table then goes to stderr)."""
    console = Console(stderr=as_json, width=120)
    with _deployment_secret():
        rows = asyncio.run(_bench(quick, lambda msg: console.log(msg)))
    table = Table(title=f"benchmarks.xfer_encrypt: cross-host pulls, KV encryption off vs on, {LAYOUT.block_bytes >> 10} KB "
                        "blocks, rounds interleaved")
    for name in ("blocks", "size", "n", "off GB/s", "on GB/s", "off e2e ms", "on e2e ms", "on/off time"):
        table.add_column(name, justify="left" if name == "blocks" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r.blocks_layout, f"{r.bytes / MB:g} MB", str(r.rounds), f"{r.off_gbps:.2f}", f"{r.on_gbps:.2f}",
                      f"{r.off_e2e_ms:.2f}", f"{r.on_e2e_ms:.2f}", f"{r.on_off:.2f}")
    console.print(table)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xfer_encrypt", description="cross-host pulls with KV "
                                     "encryption (--encrypt-kv) off and on, in interleaved rounds, and on/off")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args(argv)
    return run_encrypt_bench(as_json=args.json, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
