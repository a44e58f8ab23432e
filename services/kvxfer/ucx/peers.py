"""Finds the UCX listener of another host's kvxfer by asking its gRPC Describe (cached)."""

from __future__ import annotations

import grpc

from distserve.v1 import kvxfer_pb2, kvxfer_pb2_grpc
from services.common.auth import KVXFER
from services.common.links import internal_channel
from services.kvxfer.errors import Failure, XferError


class GrpcPeers:
    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._addresses: dict[str, tuple[str, int]] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def ucx_address(self, kvxfer_address: str) -> tuple[str, int]:
        """The (host, port) of the UCX listener of the kvxfer at kvxfer_address."""
        if kvxfer_address not in self._addresses:
            channel = self._channels.get(kvxfer_address)
            if channel is None:
                channel = self._channels[kvxfer_address] = internal_channel(kvxfer_address, KVXFER)
            try:
                reply = await kvxfer_pb2_grpc.KVXferStub(channel).Describe(
                    kvxfer_pb2.DescribeRequest(), timeout=self._timeout_s)
            except grpc.aio.AioRpcError as e:
                raise XferError(Failure.UNAVAILABLE, f"source kvxfer {kvxfer_address} does not answer: "
                                                     f"{e.code().name} {e.details()}") from e
            self._addresses[kvxfer_address] = (reply.ucx_host, reply.ucx_port)
        return self._addresses[kvxfer_address]

    def forget(self, kvxfer_address: str) -> None:
        self._addresses.pop(kvxfer_address, None)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
