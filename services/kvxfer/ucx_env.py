"""UCX settings, applied to the environment before ucxx is first imported (UCX reads them there)."""

from __future__ import annotations

import os

from services.kvxfer.config import KVXferConfig


def apply_ucx_env(config: KVXferConfig) -> None:
    """Set UCX defaults the environment has not set already."""
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")  # ucxx sets UCX_MEMTYPE_CACHE, unknown to UCX 1.21
    for name, value in (("UCX_RNDV_SCHEME", config.ucx_rndv_scheme), ("UCX_RNDV_THRESH", config.ucx_rndv_thresh),
                        ("UCX_TCP_TX_SEG_SIZE", config.ucx_tcp_seg_size),
                        ("UCX_TCP_RX_SEG_SIZE", config.ucx_tcp_seg_size), ("UCX_TLS", config.ucx_tls)):
        if value:
            os.environ.setdefault(name, value)
