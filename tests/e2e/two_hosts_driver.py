"""The stack side of test_two_hosts.py: starts a stack whose decode instances live on a second host with their
own kvxfer (in namespace B where one is given, with B's own /dev/shm where a folder is given), and where asked a
prefill whose later ranks run on that host too, or a decode whose later ranks run on this one; serves a workload
through the router and prints, as JSON, the served token ids, both kvxfers' pull and lease counts, the KV blocks
each instance holds once idle and the pool files each host holds. Run inside namespace A, as the test's own
process can reach neither namespace.

    python -m tests.e2e.two_hosts_driver SPEC_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from services.common.net import free_port
from services.common.pool_files import SHM_DIR, pool_dir
from services.kvxfer.api import KVXferClient
from services.launcher.stack import Stack, StackConfig
from tests.e2e.helpers import generate, wait_idle


async def _pull_counts(address: str) -> dict[str, int]:
    client = KVXferClient(address)
    try:
        stats = await client.stats()
        return {"pulls_ok": stats.pulls_ok, "pulls_failed": stats.pulls_failed, "bytes_pulled": stats.bytes_pulled,
                "pools": stats.pools, "live_leases": stats.live_leases}
    finally:
        await client.close()


async def serve(stack: Stack, workload: list[tuple[str, int]]) -> dict:
    results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                     for prompt, m in workload))
    return {"tokens": [[t for r in responses for t in r.token_ids] for responses in results],
            "blocks_used": [s.blocks_used for s in await wait_idle(stack)],
            "source": await _pull_counts(stack.kvxfer_address),
            "decode_host": await _pull_counts(stack.decode_kvxfer_address)}


def main(spec: dict) -> dict:
    host = spec["host"]
    config = StackConfig(model=spec["model"], host=host, grpc_port=free_port(host), http_port=free_port(host),
                         devices=("cpu:0", "cpu:1"), prefill_tp=spec.get("prefill_tp", 1),
                         prefill_pp=spec.get("prefill_pp", 1), num_blocks=256, max_batch_tokens=128,
                         log_level="WARNING", lease_ttl_s=120.0,  # a lease left behind shows as blocks in use
                         decode_tp=spec.get("decode_tp", 1), decode_pp=spec.get("decode_pp", 1),
                         decode_host=spec["decode_host"], decode_netns=spec.get("decode_netns", ""),
                         decode_shm=spec.get("decode_shm", ""), decode_env=spec.get("decode_env", {}),
                         remote_prefill_ranks=tuple(spec.get("remote_prefill_ranks", ())),
                         remote_decode_ranks=tuple(spec.get("remote_decode_ranks", ())),
                         allow_unauthenticated=True)  # the router binds the veth address, keyless on purpose
    stack = Stack(config)  # a private Redis on `host`, which the decode host reaches too
    stack.start()
    try:
        served = asyncio.run(serve(stack, [tuple(w) for w in spec["workload"]]))
        if spec.get("decode_shm"):  # the pool files of host B, which of them host A (this process) sees, and A's own
            root = Path(spec["decode_shm"])
            files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
            ids = [p.name for p in stack.procs if p.role in ("prefill", "decode")]
            here = sorted(str(p.relative_to(SHM_DIR)) for p in pool_dir().glob("*") if any(i in p.name for i in ids))
            served["decode_shm"] = {"files": files, "seen_here": [f for f in files if Path(SHM_DIR, f).exists()],
                                    "here": here}
        return served
    finally:
        stack.stop()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
