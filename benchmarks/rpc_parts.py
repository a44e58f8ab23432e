"""`python -m benchmarks.rpc_parts`: where a unary kvxfer RPC's security cost goes, one part at a time.

Four real kvxfer processes, one per combination of the two server-side parts: the deployment token checked
(a secret set) and mutual TLS on host:port (certificates set). Clients dial them so that each variant adds one
part over another: the token metadata alone (a server that checks nothing), the check, TLS alone, and all of it
over the same-host socket (no TLS: what an instance's calls to its host's kvxfer pay) and over TCP. The pull
variants time a same-host pull of one 64 KB block (one Pull RPC, the shape of an instance's KV pull) with the
token as call metadata or in the request body (auth.BODY_CREDENTIAL_METHODS), and with the body checked. Every round
times a batch of calls of every variant, in a fresh random order: wall time, and the CPU time of client and
server (schedstat of the server's threads), which a loaded host disturbs less. Figures are medians over rounds
of the mean call, and each variant's per-round ratio to its baseline in the same round (intervals.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.intervals import paired_ratio
from benchmarks.scoped_env import scoped_env
from benchmarks.self_signed import Authority
from distserve.v1 import kvxfer_pb2, kvxfer_pb2_grpc
from services.common.auth import instance_principal
from services.common.kv_layout import KVLayout
from services.common.links import call_metadata, internal_channel
from services.common.pool_files import shm_path
from services.common.secret import SECRET_ENV, ensure_secret
from services.common.tls import ENV as TLS_ENV
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient, pull_credential
from services.kvxfer.local import LocalKVXfer, start_local_kvxfer

LAYOUT = KVLayout(num_blocks=4, num_layers=4, block_size=16, num_kv_heads=2, head_dim=64)  # 64 KB blocks


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of calling: which kvxfer (token check, TLS), over which link, with the token or without."""
    name: str
    check: bool  # the server has a secret: it checks every call's token
    tls: bool  # the server has certificates: host:port is mutual TLS
    token: bool  # the client sends the token (Stats: as metadata; a pull: as `body` says)
    socket: bool  # the client dials the same-host socket (no TLS), else host:port
    baseline: str  # the variant this one adds one part to
    pull: bool = False  # the call: a same-host pull of one block, else Stats
    body: bool = False  # a pull's token travels in the request body, else as call metadata


VARIANTS = (
    Variant("socket", False, False, False, True, "socket"),
    Variant("socket, token sent", False, False, True, True, "socket"),
    Variant("socket, token checked", True, False, True, True, "socket, token sent"),
    Variant("socket, all on", True, True, True, True, "socket"),  # an instance's calls to its host's kvxfer
    Variant("tcp", False, False, False, False, "tcp"),
    Variant("tcp, mutual TLS", False, True, False, False, "tcp"),
    Variant("tcp, all on", True, True, True, False, "tcp"),
    Variant("pull", False, False, False, True, "pull", pull=True),
    Variant("pull, token as metadata", False, False, True, True, "pull", pull=True),
    Variant("pull, token in body", False, False, True, True, "pull", pull=True, body=True),
    Variant("pull, all on", True, True, True, True, "pull", pull=True, body=True),  # as an instance pulls
)


def _env(with_secret: bool, with_certs: bool, secret: str, certs: dict[str, str]) -> dict[str, str]:
    """The environment of a kvxfer or a client: the secret file and the certificates, each set or emptied."""
    return {SECRET_ENV: secret if with_secret else "",
            **{var: certs[var] if with_certs else "" for var in TLS_ENV.values()}}


def _cpu_ns(pid: int) -> int:
    """CPU time of every thread of process `pid` so far, in ns (schedstat: finer than /proc's clock ticks)."""
    return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir())


async def _time_calls(call, calls: int, server_pid: int) -> tuple[float, float, float]:
    """Per call of `call` (an async function): wall seconds, the client's CPU seconds, the server's CPU seconds."""
    cpu, server = time.process_time_ns(), _cpu_ns(server_pid)
    start = time.perf_counter()
    for _ in range(calls):
        await call()
    wall = time.perf_counter() - start
    return wall / calls, 1e-9 * (time.process_time_ns() - cpu) / calls, 1e-9 * (_cpu_ns(server_pid) - server) / calls


@dataclass(slots=True)
class Times:
    """Per variant, per round: one call's wall seconds, its client's CPU seconds, its server's CPU seconds."""
    wall: dict[str, list[float]]
    client: dict[str, list[float]]
    server: dict[str, list[float]]

    def cpu(self, name: str) -> list[float]:
        return [a + b for a, b in zip(self.client[name], self.server[name])]


class _Pulls:
    """One kvxfer's pools for the pull variants: p0's, leased once for every pull of the run, and d0's, pulled into."""

    def __init__(self, name: str) -> None:
        self.pools = [KVPool(LAYOUT, torch.device("cpu"), shm_path(f"bench-rpc-{name}-{n}")) for n in ("p0", "d0")]
        for pool in self.pools:
            pool.tensor.fill_(1.0)  # every page touched, as a serving pool's are
        self.clients: list[KVXferClient] = []
        self.handle = None

    async def start(self, address: str, pulls: int) -> None:
        """Register both pools (as their instances) and lease block 0 of p0 for `pulls` pulls."""
        self.clients = [KVXferClient(address, instance_principal(n)) for n in ("p0", "d0")]
        for client, name, pool in zip(self.clients, ("p0", "d0"), self.pools):
            await client.register_pool(name, pool.site)
        self.handle = await self.clients[0].create_lease("p0", [0], LAYOUT.block_size, ttl_s=24 * 3600.0, pulls=pulls)

    def caller(self, channel, body: bool, token: bool):
        """An async function making one pull as d0, with d0's token in the body or as metadata (or none)."""
        stub = kvxfer_pb2_grpc.KVXferStub(channel)
        request = kvxfer_pb2.PullRequest(source=self.handle, dst_instance_id="d0", dst_block_ids=[1],
                                         credential=pull_credential(instance_principal("d0")) if token and body else None)
        metadata = call_metadata(instance_principal("d0")) if token and not body else ()
        return lambda: stub.Pull(request, metadata=metadata)

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for pool in self.pools:
            pool.close()


async def measure(rounds: int, calls: int, say) -> Times:
    """Every variant's times in every round; the four kvxfers are started here and stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="distserve-bench-rpc-") as folder:
        certs = Authority("bench-rpc").issue(Path(folder) / "tls", "node")
        secret = str(ensure_secret(Path(folder) / "secret"))
        servers: dict[tuple[bool, bool], LocalKVXfer] = {}
        clients: dict[str, KVXferClient] = {}
        pulls: dict[tuple[bool, bool], _Pulls] = {}
        channels = []
        call = {}
        try:
            for check in (False, True):
                for tls in (False, True):
                    with scoped_env(_env(check, tls, secret, certs)):
                        servers[check, tls] = await start_local_kvxfer(quiet=True)
            for key in {(v.check, v.tls) for v in VARIANTS if v.pull}:
                with scoped_env(_env(key[0], False, secret, certs)):  # as its instances, over the socket
                    pulls[key] = _Pulls(f"{int(key[0])}{int(key[1])}")
                    await pulls[key].start(servers[key].address, (rounds + 1) * calls * len(VARIANTS))
            for v in VARIANTS:
                # The client's environment: the token when it sends one, certificates when it dials TLS.
                with scoped_env(_env(v.token, v.tls and not v.socket, secret, certs)):
                    address = servers[v.check, v.tls].address
                    if v.pull:
                        channels.append(internal_channel(address, instance_principal("d0"), attach=False, local=True))
                        call[v.name] = pulls[v.check, v.tls].caller(channels[-1], v.body, v.token)
                    else:
                        clients[v.name] = KVXferClient(address, local=v.socket)
                        call[v.name] = clients[v.name].stats
            pids = {v.name: servers[v.check, v.tls].proc.pid for v in VARIANTS}
            for v in VARIANTS:  # connect (and handshake) before timing
                await _time_calls(call[v.name], max(1, calls // 4), pids[v.name])
            times = Times(*({v.name: [] for v in VARIANTS} for _ in range(3)))
            rng = random.Random(0)
            for r in range(rounds):
                if r % max(1, rounds // 4) == 0:
                    say(f"round {r + 1}/{rounds}")
                for v in rng.sample(VARIANTS, len(VARIANTS)):
                    for kind, value in zip((times.wall, times.client, times.server),
                                           await _time_calls(call[v.name], calls, pids[v.name])):
                        kind[v.name].append(value)
            return times
        finally:
            for client in clients.values():
                await client.close()
            for channel in channels:
                await channel.close()
            for pool_set in pulls.values():
                await pool_set.close()
            for server in servers.values():
                server.stop()


def _table(times: Times, rounds: int, calls: int) -> Table:
    table = Table(title=f"unary kvxfer RPCs (Stats; pull: a same-host 64 KB Pull), {rounds} rounds x {calls} calls "
                        "per variant: medians; ratios paired per round, 95% interval")
    for name in ("variant", "wall us", "wall ratio", "client CPU us", "server CPU us", "CPU ratio", "over"):
        table.add_column(name, justify="left" if name in ("variant", "over") else "right", no_wrap=True)
    for v in VARIANTS:
        cells = [f"{1e6 * statistics.median(t[v.name]):.1f}" for t in (times.wall, times.client, times.server)]
        ratios = ("", "") if v.baseline == v.name else (
            paired_ratio(times.wall[v.baseline], times.wall[v.name]).text(),
            paired_ratio(times.cpu(v.baseline), times.cpu(v.name)).text())
        table.add_row(v.name, cells[0], ratios[0], cells[1], cells[2], ratios[1], "" if v.baseline == v.name else v.baseline)
    return table


def run_rpc_parts(rounds: int, calls: int) -> int:
    console = Console(width=160)
    times = asyncio.run(measure(rounds, calls, lambda text: console.print(f"[dim]{text}[/dim]")))
    console.print(_table(times, rounds, calls))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rpc_parts", description="only unary kvxfer RPCs, one "
                                     "security part at a time (token sent, token checked, mutual TLS; same-host socket "
                                     "and TCP; a same-host pull with the token as metadata or in the body): no stack, "
                                     "no model")
    parser.add_argument("--rounds", type=int, default=16, help="rounds; each measures every variant")
    parser.add_argument("--rpc-calls", type=int, default=200, help="unary kvxfer RPCs per round and variant")
    args = parser.parse_args(argv)
    return run_rpc_parts(args.rounds, args.rpc_calls)


if __name__ == "__main__":
    raise SystemExit(main())
