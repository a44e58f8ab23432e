"""The client side of test_netns.py, run inside namespace B (the test's own process cannot reach
either namespace): registers the test's source pool with kvxfer A (namespace A, across the veth
pair) and its destination pool with kvxfer B, leases blocks at A and pulls them through B.

    python -m tests.integration.kvxfer.netns_driver SPEC_JSON     # prints the pull results as JSON
"""

from __future__ import annotations

import asyncio
import json
import sys

import torch

from services.common.kv_layout import KVLayout
from services.engine.kv_pool import KVPool
from services.kvxfer.client import KVXferClient


async def drive(spec: dict) -> list[dict]:
    """Sequential pulls, then the same number again concurrently; results in the order of spec["pulls"]."""
    layout = KVLayout(**spec["layout"])
    a, b = KVXferClient(spec["a"]), KVXferClient(spec["b"])
    try:
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        # The test's pool files, mapped again here (a file of the layout's size is left as it is).
        await a.register_pool("p0", KVPool(layout, torch.device("cpu"), spec["src_path"]))
        await b.register_pool("d0", KVPool(layout, torch.device("cpu"), spec["dst_path"]))

        async def pull(src_blocks: list[int], dst_blocks: list[int]) -> dict:
            handle = await a.create_lease("p0", src_blocks, num_tokens=len(src_blocks) * layout.block_size)
            result = await b.pull(handle, "d0", dst_blocks, checksum=True, timeout_s=20)
            return {"nbytes": result.nbytes, "path": result.path}

        half = len(spec["pulls"]) // 2
        results = [await pull(s, d) for s, d in spec["pulls"][:half]]
        results += await asyncio.gather(*(pull(s, d) for s, d in spec["pulls"][half:]))
        async with asyncio.timeout(5):  # the source releases a lease when the ack crosses back
            while (await a.stats()).live_leases:
                await asyncio.sleep(0.01)
        return results
    finally:
        await a.close()
        await b.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(drive(json.loads(sys.argv[1])))))
