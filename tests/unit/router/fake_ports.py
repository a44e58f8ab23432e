"""Fakes of RouterCore's ports, in process: a dispatcher over scripted instances, their gRPC channels, the request
registry and the lease release. The instances compute like a greedy model whose token depends on its position
only, so a re-prefill of the prompt plus the tokens streamed so far goes on with the same tokens: any token lost or
repeated on a retry shows in the output."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from distserve.v1 import kv_pb2, worker_pb2
from services.common.registry import InstanceInfo
from services.common.tokenizer import BYTE_OFFSET
from services.router.dispatch import Assignment, NoInstance


def token_at(position: int) -> int:
    """The token the fake model samples at a position: a letter, so the text is readable."""
    return BYTE_OFFSET + ord("a") + position % 26


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details or code.name)


@dataclass
class Instance:
    """A scripted prefill or decode instance. `fail_prefill`: its Prefill calls fail with that status;
    `fail_after`: its first `failures` Decode calls stream that many chunks, then fail with `fail_code`."""

    id: str
    role: str
    fail_prefill: grpc.StatusCode | None = None
    fail_after: int | None = None
    fail_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    failures: int = 1
    prefills: list[worker_pb2.PrefillRequest] = field(default_factory=list)
    decodes: list[worker_pb2.DecodeRequest] = field(default_factory=list)
    cancelled: int = 0  # Decode calls the router cancelled
    step: asyncio.Event = field(default_factory=asyncio.Event)  # set: decode chunks flow (set by default)
    admit: asyncio.Event = field(default_factory=asyncio.Event)  # set: Prefill calls run (set by default)

    def __post_init__(self) -> None:
        self.step.set()
        self.admit.set()

    @property
    def info(self) -> InstanceInfo:
        return InstanceInfo(self.id, self.role, f"{self.id}:1", "host", "cpu", incarnation="1")

    async def prefill(self, request: worker_pb2.PrefillRequest) -> worker_pb2.PrefillResponse:
        self.prefills.append(request)
        await self.admit.wait()
        if self.fail_prefill is not None:
            raise rpc_error(self.fail_prefill)
        n = len(request.prompt_token_ids)
        return worker_pb2.PrefillResponse(first_token=token_at(n), kv=kv_pb2.KVHandle(
            instance_id=self.id, lease_id=f"{self.id}/{request.request_id}", num_tokens=n))

    async def lease_prefix(self, request: worker_pb2.LeasePrefixRequest) -> worker_pb2.LeasePrefixResponse:
        """A decode instance's lease of the prompt's cached prefix (it holds all but the last block of 4)."""
        held = (len(request.prompt_token_ids) - 1) // 4 * 4
        return worker_pb2.LeasePrefixResponse(kv=kv_pb2.KVHandle(instance_id=self.id, lease_id=f"{self.id}/prefix",
                                                                 num_tokens=held))

    async def decode(self, request: worker_pb2.DecodeRequest) -> AsyncIterator[worker_pb2.TokenChunk]:
        self.decodes.append(request)
        fails = self.fail_after is not None and len(self.decodes) <= self.failures
        # the first token came with the prefill, or (a choice of a shared prefill) is sampled here
        first = len(request.prompt_token_ids) + request.HasField("first_token")
        left = request.sampling.max_tokens - request.HasField("first_token")
        for i in range(left):
            if fails and i == self.fail_after:
                raise rpc_error(self.fail_code)
            await self.step.wait()
            yield worker_pb2.TokenChunk(token_ids=[token_at(first + i)], finish_reason="length" if i == left - 1 else "")


class StreamCall:
    """A server-streaming call as grpc.aio hands it out: iterated, and cancellable."""

    def __init__(self, instance: Instance, chunks: AsyncIterator[worker_pb2.TokenChunk]) -> None:
        self._instance, self._chunks = instance, chunks

    def __aiter__(self) -> AsyncIterator[worker_pb2.TokenChunk]:
        return self._chunks

    def cancel(self) -> bool:
        self._instance.cancelled += 1
        return True


class Channel:
    """The stubs' view of a channel to one instance: its methods, by their gRPC paths."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance

    def unary_unary(self, method: str, **_: object):
        if method == "/distserve.v1.Decode/LeasePrefix":
            return lambda request, timeout=None: self.instance.lease_prefix(request)
        return lambda request, timeout=None: self._only("/distserve.v1.Prefill/Prefill", method) or \
            self.instance.prefill(request)

    def unary_stream(self, method: str, **_: object):
        return lambda request, timeout=None: self._only("/distserve.v1.Decode/Decode", method) or \
            StreamCall(self.instance, self.instance.decode(request))

    @staticmethod
    def _only(faked: str, method: str) -> None:
        if method != faked:
            raise NotImplementedError(f"{method} is not faked")


class Dispatcher:
    """Instances in the order given; each acquire books its load on the first usable one of the role."""

    def __init__(self, *instances: Instance) -> None:
        self.by_id = {i.id: i for i in instances}
        self.instances = {i.id: i.info for i in instances}
        self.load: defaultdict[str, float] = defaultdict(float)
        self.failed: set[str] = set()  # keys marked failed
        self.acquired: list[str] = []

    async def acquire(self, role: str, load: float, exclude: frozenset[str] = frozenset(),
                      prefer: str = "") -> Assignment:
        usable = [i for i in self.live(role) if i.key not in exclude and i.key not in self.failed]
        if not usable:
            raise NoInstance(f"no live {role} instance")
        chosen = next((i for i in usable if i.id == prefer), usable[0])
        self.load[chosen.id] += load
        self.acquired.append(chosen.id)
        return Assignment(chosen, role, load, in_redis=False)

    async def release(self, assignment: Assignment) -> None:
        self.load[assignment.info.id] -= assignment.load

    def mark_failed(self, info: InstanceInfo, for_s: float = 5.0) -> None:
        self.failed.add(info.key)

    async def killed_by(self, info: InstanceInfo, request_id: str) -> bool:
        return False

    def live(self, role: str) -> list[InstanceInfo]:
        return [i for i in self.instances.values() if i.role == role]

    def channel(self, address: str) -> Channel:
        return Channel(self.by_id[address.split(":")[0]])

    @property
    def booked(self) -> dict[str, float]:
        """Load still booked, per instance (nothing once every request ended)."""
        return {k: v for k, v in self.load.items() if v}


class Registry:
    def __init__(self) -> None:
        self.records: list[dict] = []

    async def record_request(self, record: dict) -> None:
        self.records.append(record)


class Leases:
    """The lease release port: which handles the router ended."""

    def __init__(self) -> None:
        self.released: Counter[str] = Counter()

    async def __call__(self, handle: kv_pb2.KVHandle) -> None:
        self.released[handle.lease_id] += 1
