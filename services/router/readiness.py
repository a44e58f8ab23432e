"""Whether the router can serve: a live instance of every role its mode needs, as the registry says."""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health, health_pb2

from services.router.dispatch import Dispatcher

ROLES = {"disagg": ("prefill", "decode"), "colocated": ("colocated",), "chunked": ("chunked",)}


def missing_roles(dispatcher: Dispatcher, mode: str) -> list[str]:
    """The roles with no live instance now (empty: ready)."""
    return [role for role in ROLES[mode] if not dispatcher.live(role)]


async def publish_health(dispatcher: Dispatcher, mode: str, servicer: health.aio.HealthServicer,
                         services: tuple[str, ...], period_s: float) -> None:
    """Keeps the gRPC health status equal to the router's readiness (NOT_SERVING while a role is missing)."""
    while True:
        status = health_pb2.HealthCheckResponse.NOT_SERVING if missing_roles(dispatcher, mode) \
            else health_pb2.HealthCheckResponse.SERVING
        for name in services:
            await servicer.set(name, status)
        await asyncio.sleep(period_s)
