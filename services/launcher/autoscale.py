"""`distserve up --replan-profile FILE`: the planner's replanning loop driving this stack's instances.

The loop reads the request records the router writes, replans when the workload shifts (latency model: the
stack's own online fit at `ds:model` where its planner has made one, seeded by a `distserve profile` file of
this host; the stack's devices are the cluster), and applies the
placement with the StackActuator: instances start, drain and stop.
"""

from __future__ import annotations

import asyncio
import threading

import redis

from services.common.redis_auth import client
from services.launcher.stack import Stack
from services.launcher.stack_actuator import StackActuator
from services.planner.replan import Replanner
from services.planner.schemas import ClusterBody, ReplanRequest, SLOBody


def start_autoscaler(stack: Stack, profile: str, slo: SLOBody, interval_s: float,
                     stop: threading.Event) -> threading.Thread:
    request = ReplanRequest(model=stack.config.model, hardware=profile, slo=slo,
                            cluster=ClusterBody(nodes=1, gpus_per_node=len(stack.devices())))
    replanner = Replanner(client(redis.Redis, stack.redis_url), request, StackActuator(stack), workers=1)

    async def loop() -> None:
        done = asyncio.Event()
        waiter = asyncio.create_task(asyncio.to_thread(stop.wait))
        waiter.add_done_callback(lambda _: done.set())
        await replanner.run(interval_s, done)

    thread = threading.Thread(target=lambda: asyncio.run(loop()), name="autoscaler", daemon=True)
    thread.start()
    return thread
