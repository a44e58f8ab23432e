"""UCX settings, applied to the environment before ucxx is first imported (UCX reads them there)."""

from __future__ import annotations

import os

from services.common.net import is_loopback
from services.kvxfer.config import KVXferConfig


def apply_ucx_env(config: KVXferConfig) -> None:
    """Set UCX defaults the environment has not set already."""
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")  # ucxx sets UCX_MEMTYPE_CACHE, unknown to UCX 1.21
    for name, value in (("UCX_RNDV_SCHEME", config.ucx_rndv_scheme), ("UCX_RNDV_THRESH", config.ucx_rndv_thresh),
                        ("UCX_TCP_TX_SEG_SIZE", config.ucx_tcp_seg_size),
                        ("UCX_TCP_RX_SEG_SIZE", config.ucx_tcp_seg_size), ("UCX_TLS", config.ucx_tls)):
        if value:
            os.environ.setdefault(name, value)


def keep_ucx_on_loopback(host: str) -> None:
    """A kvxfer serving on loopback has only peers on this host: its UCX network transports then open their
    sockets on the loopback device only (UCX_NET_DEVICES=lo, unless set). UCX's connection listener is not
    covered: ucxx's create_listener takes a port, no address, and binds every interface; conn_filter.py rejects
    connection requests from other addresses, and the hello token keeps out peers without it (transport.py)."""
    if is_loopback(host):
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
