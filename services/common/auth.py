"""Authentication on the deployment's internal gRPC links: every call carries a principal and its token.

A token is HMAC-SHA256(deployment secret, principal): services present `service:<name>`, an engine instance
`instance:<id>` (what kvxfer authorizes pool operations by). One server interceptor checks it in constant
time and refuses anything else with UNAUTHENTICATED before the handler runs; health and reflection stay open
(they are read-only). One client interceptor attaches it. Without a secret (see secret.py) both are left out.

The hot-path methods in BODY_CREDENTIAL_METHODS carry the principal and token in their request instead (a
`credential` field), and no metadata: grpc.aio pays per call for sending any metadata at all, which a same-host
KV pull (one such call) feels. The interceptor lets exactly those through; their handler calls
`require_credential` before anything else, the same check in constant time against the same cached tokens.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable

import grpc

PRINCIPAL_KEY = "x-distserve-principal"
TOKEN_KEY = "x-distserve-token"
OPEN_METHODS = ("/grpc.health.v1.Health/", "/grpc.reflection.")
# Full method names whose handler checks the request's `credential` itself (a metadata token is not enough).
BODY_CREDENTIAL_METHODS = frozenset({"/distserve.v1.KVXfer/Pull", "/distserve.v1.KVXfer/PullRanges"})

ROUTER = "service:router"
KVXFER = "service:kvxfer"
PLANNER = "service:planner"
TOOL = "service:tool"  # launcher checks, benchmarks, operators' tools


def instance_principal(instance_id: str) -> str:
    return f"instance:{instance_id}"


def token(secret: bytes, principal: str) -> str:
    return hmac.new(secret, principal.encode(), hashlib.sha256).hexdigest()


def caller(context: grpc.aio.ServicerContext) -> str:
    """The principal of the call (checked by TokenCheck); "" when it named none."""
    for key, value in context.invocation_metadata() or ():
        if key == PRINCIPAL_KEY:
            return value
    return ""


class TokenCheck(grpc.aio.ServerInterceptor):
    def __init__(self, secret: bytes) -> None:
        # A deployment has a few principals: each one's token is computed once, not an HMAC per call (bounded,
        # so callers naming made-up principals cannot grow it).
        self._expected = functools.lru_cache(maxsize=1024)(functools.partial(token, secret))

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if (handler is None or details.method.startswith(OPEN_METHODS) or details.method in BODY_CREDENTIAL_METHODS
                or self.valid(details.invocation_metadata)):
            return handler
        return refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "missing or invalid deployment token")

    def valid(self, metadata) -> bool:
        principal = presented = ""
        for key, value in metadata or ():  # a loop, not a dict per call: this runs on every internal RPC
            if key == TOKEN_KEY:
                presented = value
            elif key == PRINCIPAL_KEY:
                principal = value
        return self.proves(principal, presented)

    def proves(self, principal: str, presented: str) -> bool:
        """Whether `presented` is `principal`'s token (constant-time compare)."""
        if not principal or not isinstance(principal, str) or not isinstance(presented, str):
            return False
        return hmac.compare_digest(self._expected(principal), presented)


async def require_credential(check: TokenCheck | None, principal: str, presented: str,
                             context: grpc.aio.ServicerContext) -> str:
    """A BODY_CREDENTIAL_METHODS handler's first step: abort with UNAUTHENTICATED unless the request's credential
    (principal, token) is valid; returns the principal. `check` None (no deployment secret): nothing is checked."""
    if check is not None and not check.proves(principal, presented):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                            "missing or invalid deployment token in the request's credential (this method takes it "
                            "in the body, not in call metadata)")
    return principal


def refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that ends the call with `code` and runs nothing."""

    async def unary(request, context: grpc.aio.ServicerContext):
        await context.abort(code, message)

    async def stream(request, context: grpc.aio.ServicerContext):
        await context.abort(code, message)
        yield  # an async generator, as a streaming handler must be

    kinds = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}
    make = kinds[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(stream if handler.response_streaming else unary, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


class _Attach:
    def __init__(self, pairs: tuple[tuple[str, str], ...]) -> None:
        self._pairs = pairs

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), *self._pairs)
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)


class _UnaryUnary(_Attach, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _UnaryStream(_Attach, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _StreamUnary(_Attach, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


class _StreamStream(_Attach, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


def attach_token(secret: bytes, principal: str) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors that add the principal and its token to every call (one per call kind: a channel
    files an interceptor under the first kind it implements only)."""
    pairs = token_metadata(secret, principal)
    return [kind(pairs) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]


def token_metadata(secret: bytes | None, principal: str) -> tuple[tuple[str, str], ...]:
    """The call metadata for a blocking (non-aio) stub call; empty without a secret."""
    pair = token_pair(secret, principal)
    return () if pair is None else ((PRINCIPAL_KEY, pair[0]), (TOKEN_KEY, pair[1]))


def token_pair(secret: bytes | None, principal: str) -> tuple[str, str] | None:
    """(principal, token) for a request body's credential (BODY_CREDENTIAL_METHODS); None without a secret."""
    return None if secret is None else (principal, token(secret, principal))
