"""The KV pools of an instance's ranks: where each lies and which layers and KV heads it holds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.common.cuda_ipc import CudaIpcHandle
from services.common.kv_layout import KVLayout
from services.engine.engine import LLMEngine
from services.engine.parallel.rank import rank_layout
from services.engine.parallel.runner import ParallelRunner
from services.engine.parallel.shard import Span, shard_for


@dataclass(frozen=True, slots=True)
class RankPool:
    """One rank's pool (reads as a KVPool where kvxfer registration needs one: layout, device, path)."""

    rank: int
    layers: Span
    kv_heads: Span
    layout: KVLayout
    path: str | None
    device: torch.device
    tensor: torch.Tensor | None = None  # rank 0's own pool tensor; other ranks' live in their processes
    cuda_ipc: CudaIpcHandle | None = None  # another rank's GPU pool, as its process exported it
    kvxfer: str = ""  # the kvxfer of the rank's host where it is not rank 0's (a stage on another node)


def rank_pools(engine: LLMEngine) -> list[RankPool]:
    """Every rank's pool, rank 0 first; one for a single-rank engine."""
    c, mc, runner = engine.config, engine.model_config, engine.runner
    if not isinstance(runner, ParallelRunner):  # one rank
        pool = runner.pool
        return [RankPool(0, Span(0, mc.num_layers), Span(0, mc.num_kv_heads), pool.layout, pool.path, pool.device,
                         pool.tensor)]
    pools = []
    for spec in runner.specs:
        shard = shard_for(mc, c.tp, c.pp, spec.rank)
        pools.append(RankPool(spec.rank, shard.layers, shard.kv_heads,
                              rank_layout(mc, shard, spec.num_blocks, spec.block_size, spec.dtype),
                              spec.pool_path, torch.device(spec.device),
                              tensor=runner.pool.tensor if spec.rank == 0 else None,
                              cuda_ipc=runner.ipc.get(spec.rank), kvxfer=runner.kvxfer.get(spec.rank, "")))
    return pools
