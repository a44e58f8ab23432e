"""UCX settings, applied to the environment before ucxx is first imported (UCX reads them there)."""

from __future__ import annotations

import os


def apply_ucx_env(tls: str, rndv_scheme: str) -> None:
    """Set UCX defaults the environment has not set already."""
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")  # ucxx sets UCX_MEMTYPE_CACHE, unknown to UCX 1.21
    # Without Python futures every pending ucxx request polls with asyncio.sleep(0): an idle endpoint
    # waiting for the next pull would spin the event loop at 100% CPU.
    os.environ.setdefault("UCXPY_ENABLE_PYTHON_FUTURE", "1")
    if rndv_scheme:
        os.environ.setdefault("UCX_RNDV_SCHEME", rndv_scheme)
    if tls:
        os.environ.setdefault("UCX_TLS", tls)
