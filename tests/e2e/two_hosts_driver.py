"""The stack side of test_two_hosts.py: starts a stack whose decode instances live on a second host with their
own kvxfer (in namespace B where one is given), serves a workload through the router and prints, as JSON, the
served token ids and both kvxfers' pull counts. Run inside namespace A, as the test's own process can reach
neither namespace.

    python -m tests.e2e.two_hosts_driver SPEC_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys

from services.common.net import free_port
from services.kvxfer.client import KVXferClient
from services.launcher.stack import Stack, StackConfig
from tests.e2e.helpers import generate


async def _pull_counts(address: str) -> dict[str, int]:
    client = KVXferClient(address)
    try:
        stats = await client.stats()
        return {"pulls_ok": stats.pulls_ok, "pulls_failed": stats.pulls_failed, "bytes_pulled": stats.bytes_pulled}
    finally:
        await client.close()


async def serve(stack: Stack, workload: list[tuple[str, int]]) -> dict:
    results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                     for prompt, m in workload))
    return {"tokens": [[t for r in responses for t in r.token_ids] for responses in results],
            "source": await _pull_counts(stack.kvxfer_address),
            "decode_host": await _pull_counts(stack.decode_kvxfer_address)}


def main(spec: dict) -> dict:
    host = spec["host"]
    config = StackConfig(model=spec["model"], host=host, grpc_port=free_port(host), http_port=free_port(host),
                         devices=("cpu:0", "cpu:1"), prefill_tp=spec.get("prefill_tp", 1), num_blocks=256, max_batch_tokens=128, log_level="WARNING",
                         decode_host=spec["decode_host"], decode_netns=spec.get("decode_netns", ""),
                         allow_unauthenticated=True)  # the router binds the veth address, keyless on purpose
    stack = Stack(config)  # a private Redis on `host`, which the decode host reaches too
    stack.start()
    try:
        return asyncio.run(serve(stack, [tuple(w) for w in spec["workload"]]))
    finally:
        stack.stop()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
