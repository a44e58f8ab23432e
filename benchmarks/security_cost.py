"""`python -m benchmarks.security_cost`: what the deployment's security costs, in one run, off and on interleaved.

Two worlds side by side: "off" (no deployment secret, plaintext everywhere, no API key) and "on" (a fresh
deployment secret: tokens on every internal RPC, kvxfer owner checks, the UCX hello, Redis's password; mutual
TLS on every internal gRPC link; an API key and TLS on the router's client port). Each world has its own
stack (router, 1 prefill, 1 decode) and its own pair of kvxfer processes (two "hosts" on loopback). Every
round measures both, the first side alternating, and keeps one figure per side:

- the router's time per streamed token (the median gap between tokens of two requests per side, ABBA order),
  and the same for the request made by calling prefill and decode directly; what the router adds is the
  difference;
- bench-xfer's pulls, same-host (one kvxfer) and cross-host (two kvxfers, UCX over TCP): the median wall time
  seen by the caller (gRPC included) of the round's pulls, for a few sizes;
- one unary kvxfer RPC (the mean of a batch).

Each figure is the median over rounds; on/off is the median of the per-round ratios, with a 95% bootstrap
interval over rounds (intervals.py): the goal (on/off <= 1.05) is resolved when the interval's upper end is
below it. Certificates are self-signed, made for the run (benchmarks/self_signed.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import torch
from rich.console import Console
from rich.table import Table

from benchmarks.intervals import paired_difference, paired_ratio
from benchmarks.router import direct, via_router
from benchmarks.scoped_env import scoped_env
from benchmarks.self_signed import Authority
from services.bench.xfer import KB, MB
from services.common.api_keys import add_key
from services.common.auth import TOOL, instance_principal
from services.common.devices import split_devices
from services.common.kv_layout import KVLayout
from services.common.links import internal_channel
from services.common.net import free_port
from services.common.pool_files import shm_path
from services.common.secret import SECRET_ENV, ensure_secret
from services.common.tls import ENV as TLS_ENV
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import LocalKVXfer, start_local_kvxfer
from services.launcher.stack import Stack, StackConfig

LAYOUT = KVLayout(num_blocks=512, num_layers=4, block_size=16, num_kv_heads=2, head_dim=64)  # 64 KB blocks
SIZES = (64 * KB, MB, 16 * MB)
PROMPT = list(range(3, 67))


@dataclass
class World:
    """One side of the comparison: its environment (for this process while it starts or dials the world's
    services, and for the processes it starts), its stack and its kvxfers, and what was measured."""
    name: str
    env: dict[str, str]
    router_tls: dict[str, str] = field(default_factory=dict)  # tls_cert, tls_key, tls_ca
    api_key: str = ""
    api_key_file: str = ""
    stack: Stack | None = None
    kvxfers: list[LocalKVXfer] = field(default_factory=list)
    pools: list[KVPool] = field(default_factory=list)
    rounds: dict[str, list[float]] = field(default_factory=dict)  # one value per figure and round

    def active(self) -> AbstractContextManager[None]:
        return scoped_env(self.env)

    def record(self, what: str, seconds: float) -> None:
        self.rounds.setdefault(what, []).append(seconds)


def _worlds(folder: Path) -> tuple[World, World]:
    off = World("off", {SECRET_ENV: "", **{var: "" for var in TLS_ENV.values()}})
    issued = Authority("bench-deployment").issue(folder / "tls", "node")
    on = World("on", {SECRET_ENV: str(ensure_secret(folder / "secret")), **issued},
               {"tls_cert": issued["DISTSERVE_TLS_CERT"], "tls_key": issued["DISTSERVE_TLS_KEY"],
                "tls_ca": issued["DISTSERVE_TLS_CA"]},
               api_key_file=str(folder / "api-keys"))
    on.api_key = add_key(Path(on.api_key_file), "bench")
    return off, on


def _start_stack(world: World, model: str, devices: tuple[str, ...]) -> None:
    with world.active():
        world.stack = Stack(StackConfig(model=model, grpc_port=free_port(), http_port=0, devices=devices,
                                        log_level="WARNING", api_key_file=world.api_key_file, **world.router_tls))
        world.stack.start()


async def _start_kvxfers(world: World, device: torch.device) -> tuple[KVXferClient, KVXferClient, KVXferClient]:
    """Two kvxfers; p0 and d0 on the first, d1 on the second. (source, same-host puller, cross-host puller)."""
    with world.active():
        world.kvxfers = [await start_local_kvxfer(quiet=True), await start_local_kvxfer(quiet=True)]
        world.pools = [KVPool(LAYOUT, device, shm_path(f"bench-sec-{world.name}-{n}") if device.type == "cpu" else None)
                       for n in ("p0", "d0", "d1")]
        for pool in world.pools:  # every page touched, as a serving pool's are
            pool.tensor.view(-1).copy_(torch.rand(LAYOUT.pool_bytes // LAYOUT.itemsize, device=device))
        clients = [KVXferClient(world.kvxfers[i].address, instance_principal(name))
                   for i, name in ((0, "p0"), (0, "d0"), (1, "d1"))]
    for client, name, pool in zip(clients, ("p0", "d0", "d1"), world.pools):
        await client.register_pool(name, pool.site)
    return clients[0], clients[1], clients[2]


async def _pull_seconds(source: KVXferClient, puller: KVXferClient, dst: str, nblocks: int, rng: random.Random) -> float:
    handle = await source.create_lease("p0", rng.sample(range(LAYOUT.num_blocks), nblocks),
                                       num_tokens=nblocks * LAYOUT.block_size)
    start = time.perf_counter()
    await puller.pull(handle, dst, rng.sample(range(LAYOUT.num_blocks), nblocks), timeout_s=60)
    return time.perf_counter() - start


async def _run(worlds: tuple[World, World], rounds: int, tokens: int, rpc_calls: int, device: torch.device,
               say) -> None:
    async with _dialed(worlds, device) as dialed:
        say("warming up")
        for world in worlds:
            router, prefill, decode, metadata, (src, same, cross) = dialed[world.name]
            for _ in range(2):
                await via_router(router, PROMPT, tokens, metadata)
                await direct(prefill, decode, PROMPT, tokens, -1)
            for size in SIZES:
                await _pull_seconds(src, same, "d0", size // LAYOUT.block_bytes, random.Random(0))
                await _pull_seconds(src, cross, "d1", size // LAYOUT.block_bytes, random.Random(0))
        rng = random.Random(0)
        for r in range(rounds):
            say(f"round {r + 1}/{rounds}")
            first, second = worlds if r % 2 == 0 else worlds[::-1]
            # The token streams in ABBA order: a load that drifts during the round weighs on both sides alike.
            gaps: dict[tuple[str, str], list[float]] = {}
            for how in ("router", "direct"):
                for world in (first, second, second, first):
                    router, prefill, decode, metadata, _ = dialed[world.name]
                    gaps.setdefault((world.name, how), []).extend(
                        await via_router(router, PROMPT, tokens, metadata) if how == "router"
                        else await direct(prefill, decode, PROMPT, tokens, r))
            for world in (first, second):
                _, _, _, _, (src, same, cross) = dialed[world.name]
                for how in ("router", "direct"):  # the median gap: robust to a stall of the host, which either side may draw
                    world.record(how, statistics.median(gaps[world.name, how]))
                for size in SIZES:
                    pulls: dict[str, list[float]] = {"same": [], "cross": []}
                    for _ in range(max(1, 4 * MB // size)):
                        pulls["same"].append(await _pull_seconds(src, same, "d0", size // LAYOUT.block_bytes, rng))
                        pulls["cross"].append(await _pull_seconds(src, cross, "d1", size // LAYOUT.block_bytes, rng))
                    for path, seconds in pulls.items():
                        world.record(f"{path} {size}", statistics.median(seconds))
                start = time.perf_counter()
                for _ in range(rpc_calls):
                    await src.stats()
                world.record("rpc", (time.perf_counter() - start) / rpc_calls)


@asynccontextmanager
async def _dialed(worlds: tuple[World, World], device: torch.device) -> AsyncIterator[dict]:
    """Per world: its router channel (its client TLS), prefill and decode channels (its internal credentials),
    the API key metadata, and its kvxfer clients; each made under the world's environment, closed at the end."""
    dialed, closers = {}, []
    try:
        for world in worlds:
            addr = {p.role: p.address for p in world.stack.procs if p.role}
            with world.active():
                tls = world.router_tls
                router = grpc.aio.secure_channel(world.stack.router_address, grpc.ssl_channel_credentials(
                    Path(tls["tls_ca"]).read_bytes())) if tls else grpc.aio.insecure_channel(world.stack.router_address)
                prefill, decode = internal_channel(addr["prefill"], TOOL), internal_channel(addr["decode"], TOOL)
            closers += [router.close, prefill.close, decode.close]
            clients = await _start_kvxfers(world, device)
            closers += [c.close for c in clients]
            metadata = (("authorization", f"Bearer {world.api_key}"),) if world.api_key else ()
            dialed[world.name] = (router, prefill, decode, metadata, clients)
        yield dialed
    finally:
        for close in closers:
            await close()


def _table(off: World, on: World, rounds: int, tokens: int) -> Table:
    table = Table(title=f"security off vs on: {rounds} interleaved rounds (router and direct: 2 requests of {tokens} "
                        "tokens per round and side, ABBA); medians over rounds; on/off paired per round, 95% interval")
    for name in ("figure", "off", "on", "on/off [95% interval]"):
        table.add_column(name, justify="left" if name == "figure" else "right", no_wrap=True)

    def row(name: str, key: str, scale: float, unit: str) -> None:
        a, b = off.rounds[key], on.rounds[key]
        table.add_row(name, f"{scale * statistics.median(a):.3f} {unit}", f"{scale * statistics.median(b):.3f} {unit}",
                      paired_ratio(a, b).text())

    row("router: ms per token (median gap)", "router", 1e3, "ms")
    row("direct prefill+decode: ms per token", "direct", 1e3, "ms")
    adds = {w.name: [a - b for a, b in zip(w.rounds["router"], w.rounds["direct"])] for w in (off, on)}
    table.add_row("router adds per token (on - off, ms)", f"{1e3 * statistics.median(adds['off']):.3f} ms",
                  f"{1e3 * statistics.median(adds['on']):.3f} ms",
                  paired_difference(adds["off"], adds["on"]).text(scale=1e3) + " ms")
    for path in ("same", "cross"):
        for size in SIZES:
            label = f"{size // MB} MB" if size >= MB else f"{size // KB} KB"
            row(f"{path}-host pull {label}: median wall ms", f"{path} {size}", 1e3, "ms")
    row("unary kvxfer RPC (Stats): us", "rpc", 1e6, "us")
    return table


def run_security_bench(model: str, rounds: int, tokens: int, rpc_calls: int, device: str = "cpu",
                       stack_devices: tuple[str, ...] = ("cpu:0", "cpu:1")) -> int:
    console = Console(width=120, stderr=False)

    def say(text: str) -> None:
        console.print(f"[dim]{text}[/dim]")

    with tempfile.TemporaryDirectory(prefix="distserve-bench-security-") as folder:
        worlds = _worlds(Path(folder))
        try:
            for world in worlds:
                say(f"starting the '{world.name}' stack")
                _start_stack(world, model, stack_devices)
            asyncio.run(_run(worlds, rounds, tokens, rpc_calls, torch.device(device), say))
        finally:
            for world in worlds:
                with world.active():
                    if world.stack is not None:
                        world.stack.stop()
                    for kvxfer in world.kvxfers:
                        kvxfer.stop()
                for pool in world.pools:
                    pool.close()
    console.print(_table(*worlds, rounds, tokens))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.security_cost", description="router per-token "
                                     "latency, same- and cross-host pulls and one kvxfer RPC with authentication and "
                                     "TLS off vs on, interleaved in one run")
    parser.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    parser.add_argument("--rounds", type=int, default=16, help="rounds; each measures both sides, the first "
                        "alternating (more rounds: a narrower interval)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens of the router's request in each round")
    parser.add_argument("--rpc-calls", type=int, default=200, help="unary kvxfer RPCs per round and side")
    parser.add_argument("--device", default="cpu", help="where the pulls' pools live: cpu, or cuda:N (CUDA IPC)")
    parser.add_argument("--stack-devices", default="cpu:0,cpu:1", help="the prefill's and the decode's device, in "
                        "each stack")
    args = parser.parse_args(argv)
    from services.engine.presets import resolve_model

    return run_security_bench(resolve_model(args.model), args.rounds, args.tokens, args.rpc_calls, args.device,
                              split_devices(args.stack_devices))


if __name__ == "__main__":
    raise SystemExit(main())
