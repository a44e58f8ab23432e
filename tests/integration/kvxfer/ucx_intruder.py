"""A UCX peer of test_auth.py in its own process (UCX runs once per process): connects to a kvxfer's UCX
listener with a given hello token and orders a pull of a lease; prints how it ended.

    python -m tests.integration.kvxfer.ucx_intruder HOST PORT LEASE_ID INSTANCE_ID TOKEN
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np

from services.kvxfer.config import KVXferConfig
from services.kvxfer.orders import PullOrder
from services.kvxfer.pools import MappedPool
from services.kvxfer.ranges import block_ranges
from services.kvxfer.ucx.env import apply_ucx_env
from tests.integration.kvxfer.layout import LAYOUT


async def intrude(host: str, port: int, lease_id: str, instance_id: str, token: str) -> str:
    apply_ucx_env(KVXferConfig())
    from services.kvxfer.ucx.loop import UcxLoop
    from services.kvxfer.ucx.transport import UcxPuller

    puller = UcxPuller(UcxLoop(), 5.0, token)
    dst = MappedPool("intruder", LAYOUT, "cpu", np.zeros(LAYOUT.pool_bytes, dtype=np.uint8))
    order = PullOrder(lease_id, instance_id, [1], [0], LAYOUT.block_bytes, False, True)

    async def verify(crc: int | None) -> None:
        pass

    try:
        await asyncio.wait_for(puller.pull((host, port), order, [dst.ranges(block_ranges([1], [0], LAYOUT.block_bytes),
                                                                            "dst")], verify), 15)
    except Exception as e:
        return f"refused: {type(e).__name__}"
    return "pulled" if dst.data.any() else "pulled nothing"


if __name__ == "__main__":
    host, port, lease_id, instance_id, token = sys.argv[1:6]
    print(asyncio.run(intrude(host, int(port), lease_id, instance_id, token if token != "-" else "")))
