"""A circuit breaker on a process's Redis connections: after a connection fails (refused, reset, timed out), or
once a reply has been awaited longer than `slow_s` (a stalled Redis), the breaker opens, and a call made on a
request's path fails at once (`RedisAway`, no socket wait, no retry) until a background call (`background`: the
loops that read the registry, loads and index) gets an answer and closes it. So with Redis down or stalled,
requests are routed from what the router holds without waiting on Redis, and it recovers by itself. Each opening
and closing is a log line and the state a metric.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Gauge
from redis.asyncio.connection import BlockingConnectionPool, Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)
OPEN = Gauge("distserve_redis_breaker_open", "1 while Redis is taken as away: request paths do not call it")
TRIPS = Counter("distserve_redis_breaker_trips", "times Redis was found away (the breaker opened)")
CALLS = Counter("distserve_redis_round_trips", "Redis round trips (a command or a pipeline) by where they were made: "
                "on a request's path or in the background", ["path"])
SENT = Counter("distserve_redis_sent_bytes", "bytes sent to Redis, by where the call was made", ["path"])
REFUSED = Counter("distserve_redis_breaker_refused", "Redis calls on a request's path not made while it was away")
_BACKGROUND = contextvars.ContextVar("redis_background", default=False)
TICK_S = 0.05
_FAILURES = (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError)  # Redis away, not an error reply


class RedisAway(RedisError):
    """Not a ConnectionError: redis-py does not retry it."""


class Breaker:
    def __init__(self, name: str = "redis", slow_s: float = 0.25, probe_s: float = 0.2) -> None:
        self.name = name
        self.slow_s = slow_s  # a reply awaited this long means Redis is stalled: no later call waits for it too
        self.probe_s = probe_s  # while open, one background call at most this often tries Redis
        self.opened_at: float | None = None  # monotonic; None: closed
        self._probed_at = 0.0
        # Time that counts toward a stall is the event loop's running time: `_ticks` advance every TICK_S only while
        # the loop runs, so a loop that was itself stalled (the reply may be waiting unread) opens nothing.
        self._ticks = 0
        self._ticker: asyncio.Task | None = None
        self._awaited: dict[object, int] = {}  # replies awaited now → `_ticks` when each was sent

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def check(self) -> None:
        """Before a call takes a connection: RedisAway unless Redis is taken as there, or this is a background call
        due to try it (those that wait on a stalled Redis hold connections a request would wait for)."""
        now = time.monotonic()
        if self.opened_at is None and self._awaited:
            waited = (self._ticks - min(self._awaited.values())) * TICK_S
            if waited > self.slow_s:
                self.failed(TimeoutError(f"a reply awaited for {waited:.2f} s"))
        if self.opened_at is None:
            return
        if _BACKGROUND.get() and now - self._probed_at >= self.probe_s:
            self._probed_at = now
            return
        if not _BACKGROUND.get():
            REFUSED.inc()
        raise RedisAway(f"{self.name} away for {now - self.opened_at:.1f} s")

    def failed(self, exc: BaseException) -> None:
        if self.opened_at is None:
            self.opened_at = time.monotonic()
            OPEN.set(1)
            TRIPS.inc()
            log.warning("%s unreachable (%r): routing from what this process holds until it answers", self.name, exc)

    @contextmanager
    def awaiting(self) -> Iterator[None]:
        """While a reply is awaited (a stall shows in `check` before the socket times out)."""
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())
        token = object()
        self._awaited[token] = self._ticks
        try:
            yield
        finally:
            del self._awaited[token]

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self._ticks += 1

    def answered(self) -> None:
        if self.opened_at is not None:
            log.warning("%s answers again after %.1f s", self.name, time.monotonic() - self.opened_at)
            self.opened_at = None
            OPEN.set(0)


def background(coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
    """A task whose Redis calls go through while the breaker is open (and close it once one succeeds)."""
    context = contextvars.copy_context()
    context.run(_BACKGROUND.set, True)
    return asyncio.create_task(coro, context=context)


class GuardedPool(BlockingConnectionPool):
    """Asks the breaker before handing out a connection (its connections are `GuardedConnection`s)."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.connection_kwargs["breaker"].check()
        return await super().get_connection(*args, **kwargs)


class _Guarded:
    """Mixed into redis-py's asyncio connection classes: a failed connect, send or read opens the breaker, a reply
    closes it, and every call counts."""

    def __init__(self, *, breaker: Breaker, **kwargs: Any) -> None:
        self.breaker = breaker
        super().__init__(**kwargs, retry=Retry(NoBackoff(), 0))  # type: ignore[call-arg]  # one failure opens it: no backoff

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except _FAILURES as exc:
            self.breaker.failed(exc)
            raise

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        path = "background" if _BACKGROUND.get() else "request"
        CALLS.labels(path).inc()
        SENT.labels(path).inc(len(command) if isinstance(command, (bytes, str, memoryview)) else sum(map(len, command)))
        try:
            await super().send_packed_command(command, *args, **kwargs)  # type: ignore[misc]
        except _FAILURES as exc:
            self.breaker.failed(exc)
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with self.breaker.awaiting():
                response = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except _FAILURES as exc:
            self.breaker.failed(exc)
            raise
        self.breaker.answered()
        return response


class GuardedConnection(_Guarded, Connection):
    pass


class GuardedSSLConnection(_Guarded, SSLConnection):
    pass
