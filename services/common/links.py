"""The one way the deployment's processes make internal gRPC servers and channels: token checks (auth.py)
when a deployment secret is set, and bounded message sizes on every server."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from services.common.auth import TokenCheck, attach_token
from services.common.secret import SECRET_ENV, client_secret, deployment_secret

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 16 << 20  # the largest request a server reads: a KV layout or a long prompt fits


def server_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)]


def internal_server(max_message_bytes: int = MAX_MESSAGE_BYTES,
                    interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> grpc.aio.Server:
    """A gRPC server that serves only callers with the deployment's token (health and reflection: anyone)."""
    secret = deployment_secret()
    if secret is None:
        log.warning("internal authentication off: %s is not set", SECRET_ENV)
    checks = [TokenCheck(secret)] if secret is not None else []
    return grpc.aio.server(interceptors=[*checks, *interceptors], options=server_options(max_message_bytes))


def internal_channel(address: str, principal: str) -> grpc.aio.Channel:
    """A channel whose calls carry `principal` and its token."""
    secret = client_secret()
    interceptors = attach_token(secret, principal) if secret is not None else None
    return grpc.aio.insecure_channel(address, interceptors=interceptors)
