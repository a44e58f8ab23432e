"""The KV pools of an instance's ranks: the site of each (services.common.pool_site)."""

from __future__ import annotations

from services.common.pool_site import PoolSite
from services.engine.engine import LLMEngine
from services.engine.parallel.rank import rank_layout
from services.engine.parallel.runner import ParallelRunner
from services.engine.parallel.shard import shard_for


def pool_sites(engine: LLMEngine) -> list[PoolSite]:
    """Every rank's pool, indexed by rank; one for a single-rank engine. Rank 0's is its own pool's; another rank's
    lies in its process: on GPU the CUDA IPC handle that process exported, on another node served by that node's
    kvxfer."""
    c, mc, runner = engine.config, engine.model_config, engine.runner
    sites = [runner.pool.site]
    if isinstance(runner, ParallelRunner):
        for spec in runner.specs[1:]:
            shard = shard_for(mc, c.tp, c.pp, spec.rank, c.ep)
            layout = rank_layout(mc, shard, spec.num_blocks, spec.block_size, spec.dtype)
            sites.append(PoolSite(layout, shard.layers, shard.kv_heads, spec.device, spec.pool_path,
                                  runner.ipc.get(spec.rank), runner.kvxfer.get(spec.rank, "")))
    return sites
