"""`distserve mock`: serve many mock instances in one process (`services/mocker/fleet.py`)."""

from __future__ import annotations

import argparse
import asyncio
import signal

from services.common.settings_cli import add_settings_arguments, settings_values
from services.mocker.config import MockSettings


async def serve(settings: MockSettings) -> None:
    from services.common.metrics import serve_metrics
    from services.common.registry import Registry
    from services.mocker.fleet import MockFleet

    registry = Registry.from_url(settings.redis_url, ttl_s=3 * settings.heartbeat_s)
    fleet = MockFleet(settings, registry)
    await fleet.start()
    serve_metrics(settings.metrics_port, settings.host)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await fleet.stop()
    await registry.close()


def register(subparsers: argparse._SubParsersAction) -> None:
    def run(args: argparse.Namespace) -> int:
        from services.engine.presets import resolve_model

        values = settings_values(args, MockSettings)
        values["model"] = resolve_model(values.get("model"))
        asyncio.run(serve(MockSettings(**values)))
        return 0

    p = subparsers.add_parser("mock", help="serve mock prefill and decode instances (the worker protocol, real block "
                                           "accounting, steps timed by the fitted latency model) in one process")
    add_settings_arguments(p, MockSettings)
    p.set_defaults(func=run)
