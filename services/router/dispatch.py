"""Chooses instances: shortest prefill queue, lightest decode load, from Redis (atomic with the dispatch),
falling back to the router's own counts while Redis is unreachable."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass

import grpc
from redis.exceptions import RedisError

from services.common.auth import ROUTER
from services.common.errors import NoInstance
from services.common.links import internal_channel
from services.common.registry import InstanceInfo, Registry

log = logging.getLogger(__name__)
_WAIT_POLL_S = 0.1  # how often a waiting request looks at the instance list (refreshed every refresh_s)


@dataclass(slots=True)
class Assignment:
    info: InstanceInfo
    role: str
    load: float
    in_redis: bool  # whether the load was added to Redis (so it must be taken off there)


class Dispatcher:
    def __init__(self, registry: Registry, refresh_s: float = 0.5, router_id: str = "",
                 wait_instance_s: float = 0.0, crash_wait_s: float = 0.0) -> None:
        self.registry = registry
        self.crash_wait_s = crash_wait_s  # how long to wait for the supervisor's word on a dead process
        self.wait_instance_s = wait_instance_s  # how long a request waits for an instance when none is usable
        self.router_id = router_id  # stable across restarts (its address): a restarted router is not "another"
        self.refresh_s = refresh_s
        self.instances: dict[str, InstanceInfo] = {}
        self.local_load: dict[str, float] = defaultdict(float)
        # instance id → monotonic time of this router's first booking on it while it held none of this router's,
        # or of its latest release there: about when the instance's running step began (`SloGate`)
        self.step_since: dict[str, float] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Future] = set()  # channels of dead processes being closed
        self._suspects: dict[str, float] = {}  # InstanceInfo.key → monotonic time until which it is avoided
        self.redis_load: dict[tuple[str, str], float] = defaultdict(float)  # (role, id) → load booked in Redis
        self._epoch = ""
        self._keep_until = 0.0  # monotonic; until then an instance missing from the registry is kept (Redis restarted)

    def mark_failed(self, info: InstanceInfo, for_s: float = 5.0) -> None:
        """Avoid an instance's process that just failed until its heartbeat has had time to lapse (a restarted
        process of the instance is not avoided)."""
        self._suspects[info.key] = time.monotonic() + for_s

    def _avoided(self) -> frozenset[str]:
        now = time.monotonic()
        self._suspects = {i: t for i, t in self._suspects.items() if t > now}
        return frozenset(self._suspects)

    async def refresh(self) -> None:
        try:
            found = await self.registry.instances()
        except (RedisError, OSError) as exc:
            if not self.registry.away:
                log.warning("registry unreachable, routing on cached instances: %s", exc)
            return
        for info in found:
            old = self.instances.get(info.id)
            if old is not None and old.incarnation != info.incarnation:
                self._forget_channel(old.address)  # the dead process's channel may sit in reconnect backoff
        if time.monotonic() < self._keep_until:  # Redis came back empty: the instances are back at their next beat
            found += [info for info in self.instances.values() if info.id not in {i.id for i in found}]
        self.instances = {info.id: info for info in found}

    async def keep_book(self) -> None:
        """Keeps the load book true: a router starting drops its own stale bookings (a sole one all of them),
        any router takes off those of a router whose presence lapsed; when Redis restarted empty, this router
        books again what it has in flight."""
        try:
            beat = await self.registry.router_beat(self.router_id)
            starting = not self._epoch
            if starting or beat.lapsed:  # what is left of this router's own bookings is stale or half taken off
                await self.registry.reclaim(self.router_id, force=True)
            if starting and beat.alone:  # no other router books: all the book holds is stale
                await self.registry.reset_load()
            epoch = await self.registry.epoch()
            if not starting and epoch != self._epoch:
                self._keep_until = time.monotonic() + self.registry.ttl_ms / 1000
            if not starting and (beat.lapsed or epoch != self._epoch):
                booked = {key: load for key, load in self.redis_load.items() if load}
                for (role, instance_id), load in booked.items():
                    await self.registry.add_load(role, instance_id, load, self.router_id)
                log.warning("Redis restarted empty, or this router was away: booked the load of %d instances again",
                            len(booked))
            self._epoch = epoch
            await self.registry.reclaim_dead_routers()
        except (RedisError, OSError) as exc:
            if not self.registry.away:
                log.warning("could not check the load book: %s", exc)

    async def run(self) -> None:
        while True:
            await self.keep_book()  # only here (and once before serving), so two never run at once
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    def live(self, role: str) -> list[InstanceInfo]:
        return [info for info in self.instances.values() if info.role == role]

    async def _usable(self, role: str, exclude: frozenset[str]) -> frozenset[str]:
        """Waits (up to `wait_instance_s`) for an instance of `role` whose key is neither in `exclude` nor failed
        a moment ago (a lone instance being restarted); returns the ids to pass over."""
        deadline = time.monotonic() + self.wait_instance_s
        while True:
            avoided = exclude | self._avoided()
            live = self.live(role)
            if any(i.key not in avoided for i in live):
                return frozenset(i.id for i in live if i.key in avoided)
            # Wait only for what may change: a process that is gone (its restart registers a new key), not
            # instances that answered with an error (a dependency of theirs is away).
            gone = not live or any(not self._connected(i) for i in live)
            if not gone or time.monotonic() >= deadline:
                # better an instance that failed a moment ago than none at all
                return frozenset(i.id for i in live if i.key in exclude)
            await asyncio.sleep(_WAIT_POLL_S)

    def _connected(self, info: InstanceInfo) -> bool:
        channel = self._channels.get(info.address)
        return channel is not None and channel.get_state() == grpc.ChannelConnectivity.READY

    async def killed_by(self, info: InstanceInfo, request_id: str) -> bool:
        """Whether `request_id` was in the step that killed `info`'s process (common/step_journal.py); waits
        up to crash_wait_s for the supervisor's word; False without it (the process may live, or keep no
        journal)."""
        deadline = time.monotonic() + self.crash_wait_s
        while info.journaled:
            try:
                ids = await self.registry.fatal_step(info.key)
            except (RedisError, OSError):
                return False
            if ids is not None:
                return request_id in ids
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_WAIT_POLL_S)
        return False

    async def acquire(self, role: str, load: float, exclude: frozenset[str] = frozenset(),
                      prefer: str = "") -> Assignment:
        """The least-loaded live instance of `role` whose key (InstanceInfo.key) is not in `exclude` (or `prefer`,
        when it is one of them), with `load` booked on it; waits a bounded time for one when none is usable."""
        chosen, in_redis = None, False
        exclude = await self._usable(role, exclude)
        if prefer in exclude or prefer not in self.instances:
            prefer = ""
        if not exclude:
            try:
                if prefer:
                    await self.registry.add_load(role, prefer, load, self.router_id)
                    chosen, in_redis = prefer, True
                else:
                    chosen, in_redis = await self.registry.pick(role, load, self.router_id), True
            except (RedisError, OSError) as exc:
                if not self.registry.away:  # the breaker logs an outage once
                    log.warning("registry unreachable, choosing by local counts: %s", exc)
            if chosen is not None and chosen not in self.instances:
                await self.refresh()
        if chosen is None or chosen not in self.instances:
            if in_redis and chosen is not None:
                await self._unbook(role, chosen, load)
            in_redis = False
            candidates = [i for i in self.live(role) if i.id not in exclude]
            if not candidates:
                raise NoInstance(f"no live {role} instance")
            chosen = prefer or min(candidates, key=lambda i: self.local_load[i.id]).id
        if not self.local_load[chosen]:
            self.step_since[chosen] = time.monotonic()
        self.local_load[chosen] += load
        if in_redis:
            self.redis_load[role, chosen] += load
        return Assignment(self.instances[chosen], role, load, in_redis)

    async def release(self, assignment: Assignment) -> None:
        self.local_load[assignment.info.id] -= assignment.load
        self.step_since[assignment.info.id] = time.monotonic()  # a step just ended: the next one begins
        if assignment.in_redis:
            self.redis_load[assignment.role, assignment.info.id] -= assignment.load
            await self._unbook(assignment.role, assignment.info.id, assignment.load)

    async def _unbook(self, role: str, instance_id: str, load: float) -> None:
        try:
            await self.registry.add_load(role, instance_id, -load, self.router_id)
        except (RedisError, OSError) as exc:
            if not self.registry.away:
                log.warning("could not take load off %s: %s", instance_id, exc)

    def _forget_channel(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            task = asyncio.ensure_future(channel.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = internal_channel(address, ROUTER)
        return self._channels[address]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
