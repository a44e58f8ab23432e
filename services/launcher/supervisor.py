"""Restarts the stack's processes that die: with a backoff, within a restart budget.

A restarted process comes back as it was (same name, ports, instance id), so what depends on it finds it
again: instances register their pool with a new kvxfer themselves (instance/pool_keeper.py) and their
registration with a new Redis at their next heartbeat; the router books its in-flight load again in a
Redis that came back empty (router/dispatch.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import redis
from redis.exceptions import RedisError

from services.common.redis_auth import resolve_url
from services.common.registry import publish_fatal_step
from services.common.step_journal import read_fatal_step
from services.launcher.stack import Proc, Stack

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    first_backoff_s: float = 0.5  # wait before the second restart in the window; doubles with each one after
    # The first death in the window restarts at once: a lone instance's clients are waiting for it.
    max_backoff_s: float = 8.0
    budget: int = 5  # restarts of one process within `window_s`; past it the supervisor gives up
    window_s: float = 60.0


@dataclass(slots=True)
class _History:
    restarts: deque[float] = field(default_factory=deque)  # monotonic times of restarts within the window
    died_at: float | None = None


class Supervisor:
    def __init__(self, stack: Stack, policy: RestartPolicy = RestartPolicy(), poll_s: float = 0.1) -> None:
        self.stack = stack
        self.policy = policy
        self.poll_s = poll_s
        self.gave_up = threading.Event()  # a process used up its budget: the stack cannot be kept whole
        self.restarted: list[tuple[str, float]] = []  # (name, monotonic time) of each restart
        self._history: dict[str, _History] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Before the stack stops, or its processes would come back."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            server = self.stack.embedded_redis
            if server is not None and server.exited():
                self._maybe_restart("redis", lambda r=server: (r.stop(), r.start()))
            for proc in list(self.stack.procs):
                if not proc.stopping and not proc.running():
                    if proc.role and self._history.get(proc.name, _History()).died_at is None:
                        self._publish_fatal_step(proc)  # once per death, before the restart
                    self._maybe_restart(proc.name, lambda p=proc: self.stack.respawn(p))

    def _publish_fatal_step(self, proc: Proc) -> None:
        """Tells the routers which requests were in the step a dead instance died in (none when it was killed
        from outside), so that they fail those rather than crash another instance with them."""
        fatal = read_fatal_step(proc.name, proc.returncode)
        if fatal is None:
            return
        incarnation, ids = fatal
        if ids:
            log.error("%s died (code %d) in a step of %d request(s): failing them, not retrying", proc.name,
                      proc.returncode, len(ids))
        try:
            with redis.Redis.from_url(resolve_url(self.stack.redis_url), socket_timeout=1.0) as book:
                publish_fatal_step(book, f"{proc.name}/{incarnation}", ids)
        except (RedisError, OSError) as exc:  # the routers then retry these requests, as without a journal
            log.warning("could not publish %s's fatal step: %s", proc.name, exc)

    def _maybe_restart(self, name: str, restart) -> None:
        now = time.monotonic()
        history = self._history.setdefault(name, _History())
        while history.restarts and now - history.restarts[0] > self.policy.window_s:
            history.restarts.popleft()
        if history.died_at is None:
            history.died_at = now
            log.warning("%s died; restarting it", name)
        if len(history.restarts) >= self.policy.budget:
            if not self.gave_up.is_set():
                log.error("%s died %d times within %.0f s: not restarting it", name, len(history.restarts) + 1,
                          self.policy.window_s)
                self.gave_up.set()
            return
        n = len(history.restarts)
        backoff = min(self.policy.max_backoff_s, self.policy.first_backoff_s * 2 ** (n - 1)) if n else 0.0
        if now - history.died_at < backoff:
            return
        try:
            restart()
        except Exception as exc:  # counts as a restart: the next try waits longer
            log.warning("restarting %s failed: %r", name, exc)
        history.restarts.append(now)
        history.died_at = None
        self.restarted.append((name, now))
