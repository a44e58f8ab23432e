"""kvxfer services as real processes on loopback, and real /dev/shm pools."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.net import free_port
from services.engine.kv_pool import KVLayout, KVPool, shm_path
from services.kvxfer.client import KVXferClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAYOUT = KVLayout(num_blocks=64, num_layers=2, block_size=16, num_kv_heads=2, head_dim=64)  # 32 KB blocks


@dataclass
class KVXferProcess:
    address: str
    proc: subprocess.Popen

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def wait_serving(address: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Ready when the gRPC health service says SERVING (never a fixed sleep)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"kvxfer exited with {proc.returncode}")
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"kvxfer at {address} not serving after {timeout_s} s")
            await asyncio.sleep(0.1)


@pytest.fixture
async def start_kvxfer() -> AsyncIterator:
    """Start kvxfer processes (each one 'host'); all are stopped at the end of the test."""
    procs: list[subprocess.Popen] = []

    async def start(*flags: str) -> KVXferProcess:
        port = free_port()
        cmd = [sys.executable, "-m", "services.kvxfer", "--host", "127.0.0.1", "--port", str(port), *flags]
        proc = subprocess.Popen(cmd, cwd=ROOT)
        procs.append(proc)
        address = f"127.0.0.1:{port}"
        await wait_serving(address, proc)
        return KVXferProcess(address, proc)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
