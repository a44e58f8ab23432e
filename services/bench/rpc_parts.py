"""`distserve bench-security --rpc-parts`: where a unary kvxfer RPC's security cost goes, one part at a time.

Four real kvxfer processes, one per combination of the two server-side parts: the deployment token checked
(a secret set) and mutual TLS on host:port (certificates set). Clients dial them so that each variant adds one
part over another: the token metadata alone (a server that checks nothing), the check, TLS alone, and all of it
over the same-host socket (no TLS: what an instance's calls to its host's kvxfer pay) and over TCP. Every round
times a batch of calls of every variant, in a fresh random order: wall time, and the CPU time of client and
server (schedstat of the server's threads), which a loaded host disturbs less. Figures are medians over rounds
of the mean call, and each variant's per-round ratio to its baseline in the same round (intervals.py).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from services.bench.intervals import paired_ratio
from services.bench.scoped_env import scoped_env
from services.bench.self_signed import Authority
from services.common.secret import SECRET_ENV, ensure_secret
from services.common.tls import ENV as TLS_ENV
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import LocalKVXfer, start_local_kvxfer


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of calling: which kvxfer (token check, TLS), over which link, with the token or without."""
    name: str
    check: bool  # the server has a secret: its interceptor checks every call's token
    tls: bool  # the server has certificates: host:port is mutual TLS
    token: bool  # the client sends the token metadata
    socket: bool  # the client dials the same-host socket (no TLS), else host:port
    baseline: str  # the variant this one adds one part to


VARIANTS = (
    Variant("socket", False, False, False, True, "socket"),
    Variant("socket, token sent", False, False, True, True, "socket"),
    Variant("socket, token checked", True, False, True, True, "socket, token sent"),
    Variant("socket, all on", True, True, True, True, "socket"),  # an instance's calls to its host's kvxfer
    Variant("tcp", False, False, False, False, "tcp"),
    Variant("tcp, mutual TLS", False, True, False, False, "tcp"),
    Variant("tcp, all on", True, True, True, False, "tcp"),
)


def _env(with_secret: bool, with_certs: bool, secret: str, certs: dict[str, str]) -> dict[str, str]:
    """The environment of a kvxfer or a client: the secret file and the certificates, each set or emptied."""
    return {SECRET_ENV: secret if with_secret else "",
            **{var: certs[var] if with_certs else "" for var in TLS_ENV.values()}}


def _cpu_ns(pid: int) -> int:
    """CPU time of every thread of process `pid` so far, in ns (schedstat: finer than /proc's clock ticks)."""
    return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir())


async def _time_calls(client: KVXferClient, calls: int, server_pid: int) -> tuple[float, float, float]:
    """Per call: wall seconds, the client's CPU seconds, the server's CPU seconds."""
    cpu, server = time.process_time_ns(), _cpu_ns(server_pid)
    start = time.perf_counter()
    for _ in range(calls):
        await client.stats()
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


async def measure(rounds: int, calls: int, say) -> Times:
    """Every variant's times in every round; the four kvxfers are started here and stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="distserve-bench-rpc-") as folder:
        certs = Authority("bench-rpc").issue(Path(folder) / "tls", "node")
        secret = str(ensure_secret(Path(folder) / "secret"))
        servers: dict[tuple[bool, bool], LocalKVXfer] = {}
        clients: dict[str, KVXferClient] = {}
        try:
            for check in (False, True):
                for tls in (False, True):
                    with scoped_env(_env(check, tls, secret, certs)):
                        servers[check, tls] = await start_local_kvxfer(quiet=True)
            for v in VARIANTS:
                # The client's environment: the token when it sends one, certificates when it dials TLS.
                with scoped_env(_env(v.token, v.tls and not v.socket, secret, certs)):
                    clients[v.name] = KVXferClient(servers[v.check, v.tls].address, local=v.socket)
            pids = {v.name: servers[v.check, v.tls].proc.pid for v in VARIANTS}
            for v in VARIANTS:  # connect (and handshake) before timing
                await _time_calls(clients[v.name], max(1, calls // 4), pids[v.name])
            times = Times(*({v.name: [] for v in VARIANTS} for _ in range(3)))
            rng = random.Random(0)
            for r in range(rounds):
                if r % max(1, rounds // 4) == 0:
                    say(f"round {r + 1}/{rounds}")
                for v in rng.sample(VARIANTS, len(VARIANTS)):
                    for kind, value in zip((times.wall, times.client, times.server),
                                           await _time_calls(clients[v.name], calls, pids[v.name])):
                        kind[v.name].append(value)
            return times
        finally:
            for client in clients.values():
                await client.close()
            for server in servers.values():
                server.stop()


def _table(times: Times, rounds: int, calls: int) -> Table:
    table = Table(title=f"unary kvxfer RPC (Stats), {rounds} rounds x {calls} calls per variant: medians; "
                        "ratios paired per round, 95% interval")
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
