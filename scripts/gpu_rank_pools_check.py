"""One-shot GPU check (run by gpu_parallel_check.sh on a machine with 2 GPUs): a TP 2 instance's rank pools on
cuda:0 and cuda:1 register with a kvxfer (rank 1's by the CUDA IPC handle its own process exported), and rank 1's
blocks, written by a prefill, pull into a host pool. Prints one line per check; exits 1 on a failure."""

from __future__ import annotations

import asyncio
import sys

import torch

from services.common.pool_files import shm_path
from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.kv_pool import KVPool
from services.engine.parallel.pools import pool_sites
from services.engine.presets import resolve_model
from services.instance.kv_shards import by_site, rank_pool_id, register_site
from services.kvxfer.client import KVXferClient
from services.kvxfer.local import start_local_kvxfer


async def check() -> int:
    engine = LLMEngine(EngineConfig(resolve_model("tiny-llama"), device="cuda:0", tp=2, devices=("cuda:0", "cuda:1"),
                                    num_blocks=64))
    kvxfer = await start_local_kvxfer()
    kv = KVXferClient(kvxfer.address)
    host = None
    try:
        engine.generate([list(range(1, 40))], [SamplingParams(max_tokens=1)])  # writes blocks 0.. of every rank
        sites = pool_sites(engine)
        print("rank pools:", [(rank, site.device, site.cuda_ipc is not None) for rank, site in enumerate(sites)])
        pools = {rank_pool_id("gpu-tp2", rank): site for rank, site in enumerate(sites)}
        for site in by_site(pools):  # one: every rank on this host
            await register_site(kv, "gpu-tp2", site)
        registered = (await kv.stats()).pools
        print(f"registered pools: {registered} (want 2)")
        rank1 = sites[1]
        host = KVPool(rank1.layout, torch.device("cpu"), shm_path("gpu-tp2-host"))
        await kv.register_pool("host", host.site)
        handle = await kv.create_lease("gpu-tp2.r1", [0, 1, 2], num_tokens=39)
        result = await kv.pull(handle, "host", [0, 1, 2], checksum=True, timeout_s=30)
        written = bool(host.tensor[:3].abs().sum() > 0)
        print(f"pulled {result.nbytes} bytes of rank 1's pool ({result.path}), CRC32 checked; non-zero: {written}")
        return 0 if registered == 2 and written and result.nbytes == 3 * rank1.layout.block_bytes else 1
    finally:
        await kv.close()
        kvxfer.stop()
        engine.close()
        if host is not None:
            host.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(check()))
