"""Where a pull's fixed cost with security on goes (issue 23): one-block pulls by world, every world up at once,
batches interleaved. A world: off | auth | tls | both (token, mutual TLS), "-tcp" appended to dial kvxfer's
host:port instead of its same-host socket. Prints each world's median wall time per pull, same and cross host.

    PYTHONPATH=$PWD timeout 500 python3 scripts/pull_security_probe.py off,both,off-tcp,both-tcp 40
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from services.bench.self_signed import Authority
from services.common.auth import instance_principal
from services.common.kv_layout import KVLayout
from services.common.pool_files import shm_path
from services.common.secret import SECRET_ENV, ensure_secret
from services.common.tls import ENV as TLS_ENV
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import start_local_kvxfer

LAYOUT = KVLayout(num_blocks=64, num_layers=4, block_size=16, num_kv_heads=2, head_dim=64)  # 64 KB blocks
BATCH = 20


def _env(world: str, secret: str, tls: dict[str, str]) -> dict[str, str]:
    kind = world.split("-")[0]
    env = {SECRET_ENV: secret if kind in ("auth", "both") else "", **{var: "" for var in TLS_ENV.values()}}
    return {**env, **tls} if kind in ("tls", "both") else env


@contextmanager
def _active(env: dict[str, str]):
    before = dict(os.environ)
    os.environ.update(env)  # an empty DISTSERVE_SECRET_FILE: no secret (not the user's default)
    for var in TLS_ENV.values():
        if not env[var]:
            os.environ.pop(var)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


async def main(worlds: list[str], rounds: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pull-security-probe-"))
    secret, tls = str(ensure_secret(folder / "secret")), Authority("probe").issue(folder / "tls", "node")
    up: dict[str, tuple] = {}
    try:
        for world in worlds:
            with _active(_env(world, secret, tls)):
                kvxfers = [await start_local_kvxfer(quiet=True), await start_local_kvxfer(quiet=True)]
                pools = [KVPool(LAYOUT, torch.device("cpu"), shm_path(f"probe-{world}-{n}")) for n in ("p0", "d0", "d1")]
                clients = [KVXferClient(kvxfers[i].address, instance_principal(n), local=not world.endswith("-tcp"))
                           for i, n in ((0, "p0"), (0, "d0"), (1, "d1"))]
            up[world] = (kvxfers, pools, clients)
            for client, name, pool in zip(clients, ("p0", "d0", "d1"), pools):
                await client.register_pool(name, pool)
        rng = random.Random(0)
        times: dict[str, dict[str, list[float]]] = {w: {"same": [], "cross": []} for w in worlds}
        for r in range(rounds + 1):  # round 0 warms up
            for world in worlds if r % 2 else worlds[::-1]:
                src, same, cross = up[world][2]
                for path, puller, dst in (("same", same, "d0"), ("cross", cross, "d1")):
                    handles = [await src.create_lease("p0", [rng.randrange(64)], 16) for _ in range(BATCH)]
                    start = time.perf_counter()
                    for handle in handles:
                        await puller.pull(handle, dst, [rng.randrange(64)], timeout_s=30)
                    if r:
                        times[world][path].append((time.perf_counter() - start) / BATCH * 1e6)
        for world in worlds:
            print(f"{world:9s}", "  ".join(f"{path} {statistics.median(t):.0f} us" for path, t in times[world].items()))
    finally:
        for kvxfers, pools, clients in up.values():
            for client in clients:
                await client.close()
            for kvxfer in kvxfers:
                kvxfer.stop()
            for pool in pools:
                pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].split(","), int(sys.argv[2])))
