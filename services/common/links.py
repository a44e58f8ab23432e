"""The one way the deployment's processes make internal gRPC servers, ports and channels: token checks
(auth.py) when a deployment secret is set, mutual TLS (tls.py) when certificates are set, and bounded
message sizes on every server. A server may also serve on its private same-host socket (local_socket.py),
which its same-user clients on this host dial without TLS, the token still checked."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from services.common import local_socket
from services.common.auth import TokenCheck, attach_token, token_metadata, token_pair
from services.common.net import EXCLUSIVE_PORT, bind_port
from services.common.secret import SECRET_ENV, client_secret, deployment_secret
from services.common.tls import channel_credentials, channel_options, server_credentials, tls_files

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 16 << 20  # the largest request a server reads: a KV layout or a long prompt fits
# gRPC's own reconnect backoff grows to minutes: a peer restarted at the same address would stay unreachable
# long after it is back. Internal peers are restarted by the launcher, so reconnect within a second.
RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 1000)]


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
    return grpc.aio.server(interceptors=[*checks, *interceptors],
                           options=[*server_options(max_message_bytes), *EXCLUSIVE_PORT])


def add_port(server: grpc.aio.Server, host: str, port: int) -> int:
    """Binds host:port (net.bind_port): with mutual TLS when configured; returns the port."""
    tls = tls_files()
    return bind_port(server, host, port, server_credentials(tls) if tls is not None else None)


def add_local_port(server: grpc.aio.Server, address: str) -> None:
    """Also serve on the private same-host socket named after `address` (the server's host:port); call
    `local_socket.restrict(address)` once the server has started, `local_socket.remove(address)` after it stops."""
    if not server.add_insecure_port(local_socket.serving_target(address)):
        raise SystemExit(f"cannot bind {local_socket.socket_path(address)}")


def internal_channel(address: str, principal: str, attach: bool = True, local: bool = False) -> grpc.aio.Channel:
    """A channel whose calls carry `principal` and its token (over mutual TLS when configured). `attach=False`:
    the caller passes `call_metadata(principal)` on each call itself, sparing the interceptors' cost per call
    (kvxfer's client: a few RPCs per pull). `local`: dial the server's private same-host socket when it has
    one here (no TLS; add_local_port)."""
    secret = client_secret()
    interceptors = attach_token(secret, principal) if secret is not None and attach else None
    target = local_socket.dial_target(address) if local else None
    if target is not None:
        return grpc.aio.insecure_channel(target, RECONNECT_OPTIONS, interceptors=interceptors)
    tls = tls_files()
    if tls is None:
        return grpc.aio.insecure_channel(address, RECONNECT_OPTIONS, interceptors=interceptors)
    return grpc.aio.secure_channel(address, channel_credentials(tls), [*channel_options(tls), *RECONNECT_OPTIONS],
                                   interceptors=interceptors)


def call_metadata(principal: str) -> tuple[tuple[str, str], ...]:
    """The token metadata of `principal` for one call (empty without a secret)."""
    return token_metadata(client_secret(), principal)


def call_credential(principal: str) -> tuple[str, str] | None:
    """(principal, token) for the request body of a BODY_CREDENTIAL_METHODS call (auth.py); None without a secret."""
    return token_pair(client_secret(), principal)


def blocking_channel(address: str, options: Sequence[tuple[str, int]] = ()) -> grpc.Channel:
    """A blocking channel to an internal server, for checks (health, stats); over mutual TLS when configured."""
    tls = tls_files()
    if tls is None:
        return grpc.insecure_channel(address, list(options))
    return grpc.secure_channel(address, channel_credentials(tls), [*channel_options(tls), *options])
