"""What every engine instance (prefill, decode, colocated, chunked) shares: config, engine, gRPC server,
health, Redis registration with heartbeats, KV pool registration with kvxfer, metrics, clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.devices import split_devices
from services.common.engine_settings import engine_fields
from services.common.links import add_port, internal_server
from services.common.metrics import KV_TOTAL, serve_metrics
from services.common.pool_files import shm_path
from services.common.registry import InstanceInfo, Registry
from services.common.step_journal import StepJournal
from services.engine.async_engine import AsyncEngine
from services.engine.device import setup_device
from services.engine.engine import EngineConfig, LLMEngine
from services.instance.cache_publisher import CachePublisher
from services.instance.config import InstanceSettings
from services.instance.kv_shards import register_site
from services.instance.kv_sites import InstanceKV
from services.instance.pool_keeper import PoolKeeper
from services.instance.stats import export_gauges

log = logging.getLogger(__name__)
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


ServicerFactory = Callable[[grpc.aio.Server, AsyncEngine, InstanceSettings, str, InstanceKV | None],
                           Awaitable[Callable[[], Awaitable[None]]]]


async def run_instance(settings: InstanceSettings, add_servicer: ServicerFactory) -> None:
    """Serves one instance until SIGINT/SIGTERM."""
    instance_id = settings.instance_id or f"{settings.role}-{uuid.uuid4().hex[:8]}"
    device = setup_device(settings.device)
    uses_kvxfer = settings.role in ("prefill", "decode")
    pool_path = shm_path(instance_id) if uses_kvxfer and device.type == "cpu" else None
    engine = LLMEngine(EngineConfig(
        model=settings.model, policy=settings.role, device=settings.device, **engine_fields(settings),
        pool_path=pool_path, tp=settings.tp, pp=settings.pp, ep=settings.ep,
        devices=split_devices(settings.devices), rendezvous=settings.rendezvous), device)
    incarnation = uuid.uuid4().hex[:8]
    if settings.step_journal:
        engine.journal = StepJournal(instance_id, incarnation)
    async_engine = AsyncEngine(engine)
    KV_TOTAL.labels(instance_id).set(settings.num_blocks)
    kv = InstanceKV.open(instance_id, async_engine, settings.kvxfer) if uses_kvxfer else None
    # Each rank's pool with the kvxfer of its host (a stage on another node: that node's), kept registered there.
    sites = kv.sites if kv is not None else []
    keepers = [PoolKeeper(c, s.anchor, partial(register_site, c, instance_id, s)) for s, c in sites]
    for keeper in keepers:
        await keeper.register()

    server = internal_server()
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    on_stop = await add_servicer(server, async_engine, settings, instance_id, kv)
    port = add_port(server, settings.host, settings.port)
    await server.start()
    serve_metrics(settings.metrics_port, settings.host)

    registry = Registry.from_url(settings.redis_url, ttl_s=3 * settings.heartbeat_s)
    cache_index = CachePublisher(engine.blocks, registry.cache, instance_id, incarnation)
    info = InstanceInfo(instance_id, settings.role, f"{settings.host}:{port}", settings.node, settings.device,
                        settings.kvxfer, incarnation, journaled=settings.step_journal,
                        block_size=settings.block_size if settings.prefix_caching == "on" else 0,
                        block_bytes=engine.layout.block_bytes)
    await registry.register(info)
    await health_servicer.set("", SERVING)
    log.info("%s %s serving on %s:%d (device %s)", settings.role, instance_id, settings.host, port, settings.device)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lost = None  # a TP/PP rank that exited: the instance cannot step any more
    while not stop.is_set() and not async_engine.failed and not (lost := engine.lost_rank()):
        try:
            if keepers:  # without its kvxfers the instance can neither lease nor pull
                ready = all([await keeper.check() for keeper in keepers])
                await health_servicer.set("", SERVING if ready else NOT_SERVING)
            await registry.heartbeat(info)
            await cache_index.beat()
            export_gauges(await async_engine.stats(), instance_id)
        except Exception as exc:  # Redis briefly away: keep serving, retry next beat
            log.warning("heartbeat failed: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), settings.heartbeat_s)
        except TimeoutError:
            pass

    if async_engine.failed or lost:
        log.error("%s %s stopping: %s", settings.role, instance_id, lost or "its engine failed")
    log.info("%s %s stopping", settings.role, instance_id)
    await health_servicer.enter_graceful_shutdown()
    try:
        await registry.deregister(info)
    except Exception as exc:
        log.warning("deregister failed: %s", exc)
    await server.stop(grace=settings.drain_grace_s)
    await on_stop()
    for site, client in sites:
        try:
            for pool_id in reversed(site.pools):
                await asyncio.wait_for(client.unregister_pool(pool_id), 2.0)
        except Exception as exc:  # kvxfer gone first: it holds nothing of ours any more
            log.warning("could not unregister the pools at %s: %r", client.address, exc)
        await client.close()
    async_engine.stop()
    engine.close()
    if engine.journal is not None:
        engine.journal.close()
    await registry.close()
    if async_engine.failed or lost:
        raise SystemExit(70)
