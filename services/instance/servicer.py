"""What every instance's servicer shares: the Stats RPC over its engine's snapshot."""

from __future__ import annotations

import grpc

from distserve.v1 import worker_pb2
from services.engine.async_engine import AsyncEngine
from services.instance.stats import stats_reply


class InstanceServicer:
    """Mixed into each role's generated servicer; `engine`, `instance_id` and `role` are set by the role."""

    engine: AsyncEngine
    instance_id: str
    role: str

    async def Stats(self, request: worker_pb2.InstanceStatsRequest,
                    context: grpc.aio.ServicerContext) -> worker_pb2.InstanceStatsResponse:
        stats = await self.engine.stats(request.steps_since or None)
        return stats_reply(stats, self.instance_id, self.role)
