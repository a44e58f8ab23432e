"""Wires and serves the router: gRPC (with health and reflection) and the OpenAI-compatible HTTP API."""

from __future__ import annotations

import asyncio
import logging
import signal
from functools import partial
from pathlib import Path

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.api_keys import ApiKeys, check_exposure
from services.common.chat_template import load_chat_template
from services.common.front_door import KeyCheck
from services.common.generation_config import SamplingDefaults
from services.common.links import server_options
from services.common.metrics import serve_metrics
from services.common.model_config import ModelConfig
from services.common.net import EXCLUSIVE_PORT, bind_port
from services.common.registry import Registry
from services.common.tokenizer import load_tokenizer
from services.kvxfer.api import release_handle
from services.router.chat_output import ChatParsers
from services.router.config import RouterSettings
from services.router.core import RouterCore
from services.router.dispatch import Dispatcher
from services.router.gate import SloGate
from services.router.http import build_app
from services.router.margin import ErrorWindow
from services.router.paths import PathLimits
from services.router.prefix_routing import PrefixRouter
from services.router.readiness import missing_roles, publish_health
from services.router.request import RequestBuilder
from services.router.server import RouterServicer
from services.router.slo import default_slo
from services.router.tool_parsers import PARSERS

log = logging.getLogger(__name__)


def _client_tls(settings: RouterSettings) -> grpc.ServerCredentials | None:
    """TLS for the client ports when configured: clients check the router, present nothing (API keys say who)."""
    if not settings.tls_cert:
        return None
    return grpc.ssl_server_credentials([(Path(settings.tls_key).read_bytes(), Path(settings.tls_cert).read_bytes())])


async def serve_router(settings: RouterSettings) -> None:
    keys = ApiKeys(settings.api_key_file, (settings.api_key,))
    check_exposure(settings.host, keys, settings.allow_unauthenticated, "router")
    tokenizer = load_tokenizer(settings.model)
    model_name = settings.served_model_name or Path(settings.model).name
    builder = RequestBuilder(ModelConfig.from_folder(settings.model), tokenizer, model_name, settings.max_prompt_chars,
                             load_chat_template(settings.model, settings.chat_template),
                             SamplingDefaults.from_folder(settings.model, settings.generation_config),
                             settings.report_cached_tokens)
    registry = Registry.from_url(settings.redis_url)
    dispatcher = Dispatcher(registry, settings.refresh_s, router_id=f"{settings.host}:{settings.grpc_port}",
                            wait_instance_s=settings.wait_instance_s, crash_wait_s=settings.crash_wait_s)
    await dispatcher.keep_book()
    await dispatcher.refresh()
    gate = SloGate(registry, dispatcher, settings.admission, default_slo(settings.slo_ttft_ms, settings.slo_tpot_ms),
                   settings.prefill_batch_tokens, ErrorWindow(settings.slo_ttft_error_quantile, settings.slo_tpot_error_quantile)) \
        if settings.mode == "disagg" else None
    limits = PathLimits(settings.local_prefill_tokens, settings.reverse_pull_tokens, settings.reverse_lease_ms / 1e3,
                        settings.pull_gbps * 1e9)
    fitted = (lambda: gate.model, gate.mix.mix) if gate is not None else ()  # colocated, chunked: in tokens
    prefix_router = PrefixRouter(registry, dispatcher, settings.prefill_batch_tokens, limits,
                                 *fitted) if settings.routing == "model" else None
    core = RouterCore(settings.mode, tokenizer, dispatcher, registry, settings.max_inflight, settings.max_queued,
                      settings.retries, release_lease=partial(release_handle, channel=dispatcher.channel), gate=gate, prefix_router=prefix_router,
                      local_prefill_cap=settings.local_prefill_tokens)
    refresher = asyncio.create_task(dispatcher.run())
    model_reader = asyncio.create_task(gate.run(settings.model_refresh_s)) if gate is not None else None

    checks = [KeyCheck(keys, settings.close_reflection)] if keys.enabled else []
    server = grpc.aio.server(interceptors=checks, options=[*server_options(), *EXCLUSIVE_PORT])
    router_pb2_grpc.add_RouterServicer_to_server(RouterServicer(core, builder, settings.default_max_tokens, keys), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (router_pb2.DESCRIPTOR.services_by_name["Router"].full_name, reflection.SERVICE_NAME, health.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    bind_port(server, settings.host, settings.grpc_port, _client_tls(settings))
    await server.start()
    serve_metrics(settings.metrics_port, settings.host)

    http_server = None
    if settings.http_port:
        app = build_app(core, builder, settings.default_max_tokens, keys,
                        missing=lambda: missing_roles(dispatcher, settings.mode), max_body_bytes=settings.max_body_bytes,
                        parsers=ChatParsers(settings.reasoning_parser == "think", PARSERS[settings.tool_call_parser]))
        http_server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.http_port,
                                                    log_level="warning", lifespan="off",
                                                    ssl_certfile=settings.tls_cert or None,
                                                    ssl_keyfile=settings.tls_key or None))
        http_task = asyncio.create_task(http_server.serve())
        while not http_server.started:  # fail now, not silently, when the HTTP port cannot be bound
            if http_task.done():
                raise SystemExit(f"router: HTTP server could not start on {settings.host}:{settings.http_port}")
            await asyncio.sleep(0.05)
    health_task = asyncio.create_task(publish_health(dispatcher, settings.mode, health_servicer, ("", names[0]),
                                                     settings.refresh_s))
    log.info("router (%s) serving gRPC on %s:%d, HTTP on %d (%s), metrics on %d", settings.mode, settings.host,
             settings.grpc_port, settings.http_port, "TLS" if settings.tls_cert else "plaintext", settings.metrics_port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("router stopping")
    health_task.cancel()
    await health_servicer.enter_graceful_shutdown()
    if http_server is not None:
        http_server.should_exit = True
        await http_task
    await server.stop(grace=settings.drain_grace_s)
    await core.cleanups.drain()
    refresher.cancel()
    if model_reader is not None:
        model_reader.cancel()
    await dispatcher.close()
    await registry.close()
