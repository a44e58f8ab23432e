"""Many mock instances in one process, each as a real instance is seen from outside: its own gRPC server (worker
protocol and health), its registration and heartbeat in Redis, its prefix-cache index published from its block
manager (`services/instance/cache_publisher.py`). One lease table serves them all, with Release on one address
as the host's kvxfer serves it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from distserve.v1 import kvxfer_pb2_grpc, worker_pb2_grpc
from services.common.links import add_port, internal_server
from services.common.model_config import ModelConfig
from services.common.registry import InstanceInfo, Registry
from services.instance.cache_publisher import CachePublisher
from services.mocker.config import MockSettings
from services.mocker.engine import MockEngine
from services.mocker.leases import LeaseTable
from services.mocker.server import MockDecode, MockPrefill, MockWorker, MockXfer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Mock:
    info: InstanceInfo
    worker: MockWorker
    server: grpc.aio.Server
    publisher: CachePublisher


class MockFleet:
    def __init__(self, settings: MockSettings, registry: Registry) -> None:
        self.settings = settings
        self.registry = registry
        self.leases = LeaseTable(settings.link_gbps * 1e9, settings.time_scale)
        self.mocks: list[Mock] = []
        self._xfer: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Serves and registers every mock."""
        s = self.settings
        model = ModelConfig.from_folder(s.model)
        self._xfer = internal_server()
        kvxfer_pb2_grpc.add_KVXferServicer_to_server(MockXfer(self.leases), self._xfer)
        fleet_health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(fleet_health, self._xfer)
        xfer_address = f"{s.host}:{add_port(self._xfer, s.host, s.port)}"
        await self._xfer.start()
        self._tasks.append(asyncio.create_task(self.leases.expire()))
        incarnation = uuid.uuid4().hex[:8]
        for role, count in (("prefill", s.prefill), ("decode", s.decode)):
            for i in range(count):
                instance_id = f"{s.id_prefix}-{role}-{i}"
                engine = MockEngine(instance_id, model, s, self.leases)
                worker = (MockPrefill if role == "prefill" else MockDecode)(engine, xfer_address)
                server = internal_server()
                add = worker_pb2_grpc.add_PrefillServicer_to_server if role == "prefill" \
                    else worker_pb2_grpc.add_DecodeServicer_to_server
                add(worker, server)
                checks = health.aio.HealthServicer()
                health_pb2_grpc.add_HealthServicer_to_server(checks, server)
                port = add_port(server, s.host, 0)
                await server.start()
                await checks.set("", health_pb2.HealthCheckResponse.SERVING)
                info = InstanceInfo(instance_id, role, f"{s.host}:{port}", s.node, "mock", xfer_address, incarnation,
                                    block_size=s.block_size, block_bytes=s.block_size * s.kv_bytes_per_token)
                loop = engine.run_prefills() if role == "prefill" else engine.run_decodes()
                self._tasks.append(asyncio.create_task(loop))
                self.mocks.append(Mock(info, worker, server,
                                       CachePublisher(engine.blocks, self.registry.cache, instance_id, incarnation)))
        await self.beat()
        await fleet_health.set("", health_pb2.HealthCheckResponse.SERVING)
        self._tasks.append(asyncio.create_task(self._beats()))
        log.info("%d prefill and %d decode mocks serving (leases released at %s)", s.prefill, s.decode, xfer_address)

    async def beat(self) -> None:
        """Every mock's heartbeat and prefix-index batch."""
        for mock in self.mocks:
            await self.registry.heartbeat(mock.info)
            await mock.publisher.beat()

    async def _beats(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            try:
                await self.beat()
            except Exception as exc:  # Redis briefly away: keep serving, publish again next beat
                log.warning("heartbeat failed: %s", exc)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for mock in self.mocks:
            try:
                await self.registry.deregister(mock.info)
            except Exception as exc:
                log.warning("deregister of %s failed: %s", mock.info.id, exc)
            await mock.server.stop(grace=0)
        if self._xfer is not None:
            await self._xfer.stop(grace=0)
