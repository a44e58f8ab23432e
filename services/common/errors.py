"""The errors a request can meet on its path, and their one mapping to gRPC and HTTP statuses.

Every boundary (the instances' servicers, the router's gRPC servicer and its HTTP front end) turns an
exception into a client-visible status through `status_of`; nothing else maps errors.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import grpc

log = logging.getLogger(__name__)


class ServingError(Exception):
    """An error with a status a client may see."""

    grpc_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL


class EngineInputError(ServingError, ValueError):
    """A request the engine refuses; `field` names what is wrong."""

    grpc_code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Overloaded(ServingError):
    """A queue is full."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class SloUnmet(Overloaded):
    """The router predicts the request would miss its latency objective; a later try may meet it."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(ServingError):
    """Capacity that is missing now; another instance, or a later try, may serve the request."""

    grpc_code = grpc.StatusCode.UNAVAILABLE


class EngineFailed(Unavailable):
    """The engine's step raised; the engine serves nothing more (the router retries elsewhere)."""


class LocalPrefillDeclined(ServingError):
    """A decode instance will not prefill this prompt itself (more uncached than the router's cap, or its share of
    steps for local prefills spent); the router sends it by a prefill instance instead."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class RequestFailed(ServingError):
    """The engine's step failed for this request alone; the engine serves on, and no other instance should try it."""

    grpc_code = grpc.StatusCode.INTERNAL


class CrashedInstance(RequestFailed):
    """The request was in the step that crashed its instance's process: it is not retried on another one."""


class NoInstance(Unavailable):
    """No live instance of the role can take the request."""


@dataclass(frozen=True, slots=True)
class HttpStatus:
    status: int
    kind: str  # the OpenAI error type


HTTP_OF_GRPC: dict[grpc.StatusCode, HttpStatus] = {
    grpc.StatusCode.INVALID_ARGUMENT: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: HttpStatus(401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: HttpStatus(403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: HttpStatus(404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: HttpStatus(429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: HttpStatus(503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: HttpStatus(504, "timeout_error"),
}
INTERNAL = HttpStatus(500, "internal_error")


# Downstream codes whose details speak to the client about its own request; any other code's details may name
# internal addresses or show a traceback, so the client gets the code's plain meaning instead.
CLIENT_DETAILS = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DEADLINE_EXCEEDED})
PLAIN_MESSAGE = {
    grpc.StatusCode.UNAVAILABLE: "a service this request needs is unavailable now; retry",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the request's deadline passed",
    grpc.StatusCode.CANCELLED: "the request was cancelled",
}
RETRY_AFTER_S = {grpc.StatusCode.UNAVAILABLE: 1, grpc.StatusCode.RESOURCE_EXHAUSTED: 1}
# A downstream service that could not be reached, or that answered with a status meaning "not now",
# is capacity that is missing: the client may retry.
UNAVAILABLE_DOWNSTREAM = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                    grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.NOT_FOUND})


@dataclass(frozen=True, slots=True)
class Status:
    """What a client is told: the gRPC code, its HTTP status, the message and the field at fault."""

    code: grpc.StatusCode
    message: str
    field: str | None = None
    retry_after_s: float | None = None  # when a later try may succeed (HTTP Retry-After, gRPC retry-after)

    @property
    def http(self) -> HttpStatus:
        return HTTP_OF_GRPC.get(self.code, INTERNAL)


def status_of(exc: BaseException) -> Status | None:
    """The status of an expected failure; None for anything else (a bug: see `internal_status`). Missing
    capacity and overload say when to retry (the error's own figure, else RETRY_AFTER_S)."""
    if isinstance(exc, ServingError):
        retry = getattr(exc, "retry_after_s", None)
        return Status(exc.grpc_code, str(exc), getattr(exc, "field", None),
                      RETRY_AFTER_S.get(exc.grpc_code) if retry is None else retry)
    if isinstance(exc, grpc.aio.AioRpcError):  # a downstream service's status passes through, its details vetted
        code = exc.code()
        if code in UNAVAILABLE_DOWNSTREAM:
            code = grpc.StatusCode.UNAVAILABLE
        elif code not in HTTP_OF_GRPC:
            code = grpc.StatusCode.INTERNAL
        if code in CLIENT_DETAILS and exc.code() == code:
            return Status(code, exc.details() or PLAIN_MESSAGE.get(code, code.name), None, RETRY_AFTER_S.get(code))
        return Status(code, PLAIN_MESSAGE.get(code, "internal error"), None, RETRY_AFTER_S.get(code))
    return None


def internal_status(exc: BaseException) -> Status:
    """What a client is told of an unexpected failure: INTERNAL, without the exception's text (which may name
    internal addresses); the caller logs the exception."""
    return Status(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__})")


async def abort_with(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Ends the RPC with the status of `exc`; an unexpected error is logged and ends it as INTERNAL."""
    status = status_of(exc)
    if status is None:
        log.error("unexpected error", exc_info=exc)
        status = internal_status(exc)
    if status.retry_after_s is not None:
        context.set_trailing_metadata((("retry-after", str(math.ceil(status.retry_after_s))),))
    await context.abort(status.code, status.message)
