"""Checks at a front door (router, planner): API keys on gRPC and HTTP, and bounded HTTP request bodies."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import grpc

from services.common.api_keys import ApiKeys
from services.common.auth import refusal

HEALTH = "/grpc.health.v1.Health/"
REFLECTION = "/grpc.reflection."


class KeyCheck(grpc.aio.ServerInterceptor):
    """Refuses gRPC calls without a current API key (`authorization: Bearer <key>`) with UNAUTHENTICATED;
    health always passes, reflection unless `close_reflection`."""

    def __init__(self, keys: ApiKeys, close_reflection: bool = False) -> None:
        self._keys = keys
        self._open = (HEALTH,) if close_reflection else (HEALTH, REFLECTION)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(self._open):
            return handler
        authorization = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        if isinstance(authorization, str) and self._keys.allows_bearer(authorization):
            return handler
        return refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "missing or wrong API key")


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` (declared or streamed) gets 413 before the app reads on."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await _too_large(send, self.max_bytes)
        seen = 0

        async def bounded():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge
            return message

        try:
            await self.app(scope, bounded, send)
        except BodyTooLarge:
            await _too_large(send, self.max_bytes)


class BodyTooLarge(Exception):
    pass


async def _too_large(send, max_bytes: int) -> None:
    body = json.dumps({"error": {"message": f"request body over {max_bytes} bytes", "type": "invalid_request_error",
                                 "param": None, "code": None}}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
