"""The errors a request can meet on its path, and their one mapping to gRPC and HTTP statuses.

Every boundary (the instances' servicers, the router's gRPC servicer and its HTTP front end) turns an
exception into a client-visible status through `status_of`; nothing else maps errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import grpc


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
    """The status of an expected failure; None for anything else (a bug, to be raised as it is)."""
    if isinstance(exc, ServingError):
        return Status(exc.grpc_code, str(exc), getattr(exc, "field", None), getattr(exc, "retry_after_s", None))
    if isinstance(exc, grpc.aio.AioRpcError):  # a downstream service's status passes through
        return Status(exc.code(), exc.details() or "")
    return None


async def abort_with(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Ends the RPC with the status of `exc`; re-raises anything unexpected."""
    status = status_of(exc)
    if status is None:
        raise exc
    if status.retry_after_s is not None:
        context.set_trailing_metadata((("retry-after", str(math.ceil(status.retry_after_s))),))
    await context.abort(status.code, status.message)
