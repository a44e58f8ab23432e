"""kvxfer services as real processes on loopback, and real /dev/shm pools."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import torch

from services.common.kv_layout import KVLayout
from services.common.pool_files import shm_path
from services.common.secret import SECRET_ENV, ensure_secret
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import LocalKVXfer, start_local_kvxfer
from tests.integration.kvxfer.layout import LAYOUT


@pytest.fixture
def secret_file(tmp_path, monkeypatch) -> str:
    """A deployment secret for this test: the kvxfer processes it starts and its clients read it."""
    path = str(ensure_secret(tmp_path / "secret"))
    monkeypatch.setenv(SECRET_ENV, path)
    return path


@pytest.fixture
async def start_kvxfer() -> AsyncIterator:
    """Start kvxfer processes (each one 'host'); all are stopped at the end of the test."""
    started: list[LocalKVXfer] = []

    async def start(*flags: str) -> LocalKVXfer:
        started.append(await start_local_kvxfer(*flags))
        return started[-1]

    yield start
    for kvxfer in started:
        kvxfer.stop()


@pytest.fixture
def make_pool() -> Iterator:
    """Real /dev/shm pools of LAYOUT filled with random bytes; the files are removed afterwards."""
    pools: list[KVPool] = []

    def make(instance_id: str, layout: KVLayout = LAYOUT, fill: bool = True) -> KVPool:
        pool = KVPool(layout, torch.device("cpu"), shm_path(instance_id))
        pools.append(pool)
        if fill:
            pool.tensor.copy_(torch.randn(layout.shape))
        return pool

    yield make
    for pool in pools:
        pool.close()


@pytest.fixture
async def clients() -> AsyncIterator:
    made: list[KVXferClient] = []

    def connect(address: str) -> KVXferClient:
        made.append(KVXferClient(address))
        return made[-1]

    yield connect
    for client in made:
        await client.close()


def block_bytes(pool: KVPool, block_ids: list[int]) -> list[bytes]:
    return [pool.tensor[b].numpy().tobytes() for b in block_ids]
