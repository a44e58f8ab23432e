"""`python -m benchmarks.xfer_reshard`: re-sharding pulls (TP 2 → 1, TP 1 → 2, PP 2 → 1) beside a same-layout pull
of the same bytes, on one host (one kvxfer) and across hosts (two kvxfers on loopback: the destination's pulls
over UCX from the source's).

The KV shape is Llama-3-8B's (8 KV heads of 128, bf16-sized elements) over 4 layers: a TP 2 rank holds 4 heads,
so a re-sharding pull moves 1 KB runs (per block, layer, K/V and token slot); PP moves whole layer slabs. Blocks
are drawn at random on both sides (no runs merge). GB/s from kvxfer's own timing, median over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
from dataclasses import asdict, dataclass

import torch
from rich.console import Console
from rich.table import Table

from services.common.kv_layout import KVLayout
from services.common.pool_files import shm_path
from services.common.pool_site import PoolSite
from services.common.span import Span
from services.decode.reshard import reshard_copies
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import start_local_kvxfer

BLOCKS, LAYERS, BS, HEADS, HEAD_DIM, DTYPE = 320, 4, 16, 8, 128, "float16"
MB = 1 << 20
SIZES = (MB, 4 * MB, 16 * MB, 64 * MB)
GOAL_RATIO, GOAL_FROM_BYTES = 0.5, 4 * MB


def _layout(layers: int, heads: int) -> KVLayout:
    return KVLayout(BLOCKS, layers, BS, heads, HEAD_DIM, DTYPE)


FULL = _layout(LAYERS, HEADS)
# instance → its rank pools (pool id, layers, heads): rank 0's id is the instance's
INSTANCES = {
    "tp1": [("tp1", Span(0, LAYERS), Span(0, HEADS))],
    "tp2": [("tp2", Span(0, LAYERS), Span(0, HEADS // 2)), ("tp2.r1", Span(0, LAYERS), Span(HEADS // 2, HEADS // 2))],
    "pp2": [("pp2", Span(0, LAYERS // 2), Span(0, HEADS)), ("pp2.r1", Span(LAYERS // 2, LAYERS // 2), Span(0, HEADS))],
}
CASES = [("TP 2 → TP 1", "tp2", "tp1"), ("TP 1 → TP 2", "tp1", "tp2"), ("PP 2 → PP 1", "pp2", "tp1")]


@dataclass(frozen=True, slots=True)
class Row:
    path: str  # "same-host" | "cross-host"
    case: str
    bytes: int
    ranges: int
    repeats: int
    gbps: float           # the re-sharding pull
    same_layout_gbps: float  # a TP 1 → TP 1 block pull of the same bytes, beside it
    ratio: float


def _sites(name: str, prefix: str) -> dict[str, PoolSite]:
    return {prefix + pid: PoolSite(_layout(layers.count, heads.count), layers, heads)
            for pid, layers, heads in INSTANCES[name]}


async def _bench(quick: bool, say) -> list[Row]:
    pools: list[KVPool] = []
    hosts = [await start_local_kvxfer(quiet=True), await start_local_kvxfer(quiet=True)]
    source, other = (KVXferClient(h.address) for h in hosts)
    try:
        for side in ("src-", "dst-"):
            for name, ranks in INSTANCES.items():
                for pid, layers, heads in ranks:
                    pool = KVPool(_layout(layers.count, heads.count), torch.device("cpu"), shm_path(f"bench-{side}{pid}"))
                    pool.tensor.view(-1).copy_(torch.rand(pool.tensor.numel()))  # every page touched
                    pools.append(pool)
                    owner = "" if pid == name else side + name
                    for client in (source, other) if side == "dst-" else (source,):
                        await client.register_pool(side + pid, pool.site, owner=owner)
        rng = random.Random(0)
        rows = []
        for path, client in (("same-host", source), ("cross-host", other)):
            rows += await _bench_path(path, source, client, rng, quick, say)
        return rows
    finally:
        for client in (source, other):
            await client.close()
        for host in hosts:
            host.stop()
        for pool in pools:
            pool.close()


async def _bench_path(path: str, source: KVXferClient, client: KVXferClient, rng: random.Random, quick: bool,
                      say) -> list[Row]:
    """Leases at `source`; pulls through `client` (the source's kvxfer: same host; the other: across hosts)."""
    rows = []
    for label, src, dst in CASES:
        for nbytes in SIZES:
            nblocks = nbytes // FULL.block_bytes
            repeats = 3 if quick else max(5, min(20, 64 * MB // nbytes))
            say(f"{path}, {label}: {nbytes / MB:g} MB x {repeats}")
            reshard, same, ranges = [], [], 0
            for _ in range(repeats + 1):  # the first of each: a warm-up
                sb, db = rng.sample(range(BLOCKS), nblocks), rng.sample(range(BLOCKS), nblocks)
                handle = await source.create_lease("src-tp1", sb, nblocks * BS)
                same.append((await client.pull(handle, "dst-tp1", db, timeout_s=60)).seconds)
                handle = await source.create_lease("src-" + src, sb, nblocks * BS)
                copies = reshard_copies(_sites(src, "src-"), sb, _sites(dst, "dst-"), db)
                ranges = sum(len(c.length) for c in copies)
                reshard.append((await client.pull_ranges(handle, copies, timeout_s=60)).seconds)
            gbps, base = nbytes / statistics.median(reshard[1:]) / 1e9, nbytes / statistics.median(same[1:]) / 1e9
            rows.append(Row(path, label, nbytes, ranges, repeats, round(gbps, 3), round(base, 3), round(gbps / base, 3)))
    return rows


def run_reshard_bench(as_json: bool, quick: bool) -> int:
    console = Console(stderr=as_json, width=120)
    rows = asyncio.run(_bench(quick, lambda msg: console.log(msg)))
    table = Table(title=f"benchmarks.xfer_reshard: {HEADS} KV heads x {HEAD_DIM}, {DTYPE}, {LAYERS} layers, "
                        f"{FULL.block_bytes // 1024} KB blocks, random blocks")
    for name in ("path", "case", "size", "ranges", "n", "re-shard GB/s", "same-layout GB/s", "ratio"):
        table.add_column(name, justify="left" if name in ("path", "case") else "right", no_wrap=True)
    for r in rows:
        table.add_row(r.path, r.case, f"{r.bytes / MB:g} MB", str(r.ranges), str(r.repeats), f"{r.gbps:.2f}",
                      f"{r.same_layout_gbps:.2f}", f"{r.ratio:.2f}")
    console.print(table)
    for path, label in dict.fromkeys((r.path, r.case) for r in rows):
        worst = min((r for r in rows if (r.path, r.case) == (path, label) and r.bytes >= GOAL_FROM_BYTES),
                    key=lambda r: r.ratio)
        verdict = "met" if worst.ratio >= GOAL_RATIO else "NOT met"
        console.print(f"{path}, {label}: lowest ratio to a same-layout pull at >= 4 MB is {worst.ratio:.2f} "
                      f"({worst.bytes / MB:g} MB); goal {GOAL_RATIO:.0%}: {verdict}")
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xfer_reshard", description="re-sharding pulls between "
                                     "TP/PP layouts (TP 2 → 1, 1 → 2, PP 2 → 1) beside same-layout pulls of the same bytes")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args(argv)
    return run_reshard_bench(as_json=args.json, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
