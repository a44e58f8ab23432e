"""The router's one retry policy for a request whose instance fails it.

A failure is one of three kinds: the instance went away (its call ended UNAVAILABLE or CANCELLED, or no live
instance was left), so another instance of the role may serve the same call; the K/V to decode from went away
(FAILED_PRECONDITION, ABORTED: decode could not pull it), so the prompt is prefilled again; anything else (bad input,
a deadline) fails the request. Each call (the prefill, the decode) tries at most `retries` other instances, none
twice, and a decode only until it streamed a token; the request re-prefills at most `retries` times.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from services.router.dispatch import Assignment, Dispatcher, NoInstance

log = logging.getLogger(__name__)
INSTANCE_GONE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
KV_GONE = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED)  # decode could not pull: re-prefill


class Failure(enum.Enum):
    INSTANCE_GONE = "another instance"
    KV_GONE = "re-prefill"
    FINAL = "fail"


def failure(exc: BaseException) -> Failure:
    if isinstance(exc, NoInstance):
        return Failure.INSTANCE_GONE
    if isinstance(exc, grpc.aio.AioRpcError):
        if exc.code() in INSTANCE_GONE:
            return Failure.INSTANCE_GONE
        if exc.code() in KV_GONE:
            return Failure.KV_GONE
    return Failure.FINAL


@dataclass(slots=True)
class InstanceTries:
    """One call's tries of instances of a role: the next instance to book, and whether a failure allows another.
    `blame` raises when the failed instance's process died of this very request (retried, it would kill another)."""

    dispatcher: Dispatcher
    role: str
    load: float
    retries: int
    blame: Callable[[Assignment, Exception], Awaitable[None]]
    prefer: str = ""  # the instance picked at arrival, for the first try
    request_id: str = ""  # for the log
    failed: set[str] = field(default_factory=set)  # InstanceInfo.key of each instance that failed the call

    async def next(self) -> Assignment:
        """The least-loaded usable instance that has not failed this call, with the load booked on it."""
        return await self.dispatcher.acquire(self.role, self.load, frozenset(self.failed),
                                             "" if self.failed else self.prefer)

    async def failed_on(self, assignment: Assignment, exc: Exception, streamed: bool = False) -> None:
        """Returns when another instance may take the call; else raises `exc` (or the blame's error). An instance
        that went away is avoided by the dispatcher for a while, whatever happens next."""
        if failure(exc) is not Failure.INSTANCE_GONE:
            raise exc
        self.dispatcher.mark_failed(assignment.info)
        await self.blame(assignment, exc)
        if streamed or len(self.failed) == self.retries:
            raise exc
        log.warning("%s on %s failed (%s); retrying", self.role, assignment.info.id, exc,
                    extra={"request_id": self.request_id})
        self.failed.add(assignment.info.key)
