"""Optional mutual TLS on the deployment's internal gRPC links (needed where they leave the host).

Configured by three PEM files in the environment: DISTSERVE_TLS_CA (the deployment's CA: the only one whose
certificates a peer accepts), DISTSERVE_TLS_CERT and DISTSERVE_TLS_KEY (this process's certificate, used both
as server and as client). DISTSERVE_TLS_SERVER_NAME, if set, is the name checked in a server's certificate
instead of the dialed host (one certificate for a whole deployment). None set: plaintext (loopback stacks).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

ENV = {"ca": "DISTSERVE_TLS_CA", "cert": "DISTSERVE_TLS_CERT", "key": "DISTSERVE_TLS_KEY"}
SERVER_NAME_ENV = "DISTSERVE_TLS_SERVER_NAME"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: bytes
    cert: bytes
    key: bytes
    server_name: str = ""


def tls_files() -> TlsFiles | None:
    """The configured certificates, or None; ValueError when only some of the three are set."""
    paths = {field: os.environ.get(var, "") for field, var in ENV.items()}
    if not any(paths.values()):
        return None
    missing = [ENV[field] for field, path in paths.items() if not path]
    if missing:
        raise ValueError(f"mutual TLS needs {', '.join(ENV.values())}; {', '.join(missing)} unset")
    return TlsFiles(**{field: Path(path).read_bytes() for field, path in paths.items()},
                    server_name=os.environ.get(SERVER_NAME_ENV, ""))


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """Serves only clients whose certificate the deployment's CA signed."""
    return grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True)


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert)


def client_port_channel(address: str, ca: bytes | None = None,
                        options: Sequence[tuple[str, int]] = ()) -> grpc.Channel:
    """A blocking channel to a client port (the router's): TLS checked against the CA `ca` when given (the
    router's own --tls-cert, not the deployment's internal mTLS), else plaintext."""
    if ca is None:
        return grpc.insecure_channel(address, list(options))
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca), list(options))


def channel_options(tls: TlsFiles) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
