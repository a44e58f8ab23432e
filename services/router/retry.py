"""The router's one retry policy for a request whose instance fails it.

A failure is one of three kinds: the instance went away (its call ended UNAVAILABLE or CANCELLED, or no live
instance was left), so another instance of the role may serve the same call; the K/V to decode from went away
(FAILED_PRECONDITION, ABORTED: decode could not pull it), so the prompt is prefilled again; anything else (bad input,
a deadline) fails the request. Each call (the prefill, the decode) tries at most `retries` other instances, none
twice, and a decode only until it streamed a token; when no other instance may take it, the request re-prefills,
at most `retries` times. `Retries.after` is that rule, one decision per failed call.
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


class Next(enum.Enum):
    ANOTHER_INSTANCE = "the same call on another instance of its role"
    RE_PREFILL = "re-prefill"


@dataclass(slots=True)
class Retries:
    """One request's retry state: the instances that failed its current call, and the re-prefills it has left.
    `blame` raises when the failed instance's process died of this very request (retried, it would kill another)."""

    dispatcher: Dispatcher
    retries: int  # other instances per call
    re_prefills: int  # left
    blame: Callable[[Assignment, Exception], Awaitable[None]]
    request_id: str = ""  # for the log
    failed: set[str] = field(default_factory=set)  # InstanceInfo.key of each instance that failed the current call

    async def book(self, role: str, load: float, prefer: str = "") -> Assignment:
        """The least-loaded usable instance that has not failed the current call, with the load booked on it;
        `prefer`: the instance picked at arrival, for the call's first try."""
        return await self.dispatcher.acquire(role, load, frozenset(self.failed), "" if self.failed else prefer)

    def next_call(self) -> None:
        """The current call succeeded: the next one (the decode after the prefill) has its own tries."""
        self.failed.clear()

    async def after(self, exc: Exception, assignment: Assignment | None, elsewhere: bool = True) -> Next:
        """The next turn after `exc` failed a call on `assignment` (None: it reached no instance we blame), or
        raises `exc`. `elsewhere`: whether another instance may take the same call (not once a decode streamed a
        token, nor for K/V other choices share). An instance that went away is avoided by the dispatcher for a
        while, whatever happens next."""
        kind = failure(exc)
        if kind is Failure.FINAL:
            raise exc
        if kind is Failure.INSTANCE_GONE and assignment is not None:
            self.dispatcher.mark_failed(assignment.info)
            await self.blame(assignment, exc)
            if elsewhere and len(self.failed) < self.retries:
                log.warning("%s on %s failed (%s); retrying", assignment.info.role, assignment.info.id, exc,
                            extra={"request_id": self.request_id})
                self.failed.add(assignment.info.key)
                return Next.ANOTHER_INSTANCE
        if not self.re_prefills:
            raise exc
        self.re_prefills -= 1
        self.failed.clear()
        log.warning("instance call failed (%s); re-prefilling", exc, extra={"request_id": self.request_id})
        return Next.RE_PREFILL
