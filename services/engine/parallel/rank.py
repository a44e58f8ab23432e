"""One rank's share of a step: its layers and heads over its own KV pool, micro-batches through the stages.

Stage s receives each micro-batch's hidden states from the same TP rank of stage s - 1, runs its layers and
sends them on; the last stage's TP rank 0 computes the logits of the rows rank 0 samples and sends them there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.model_config import ModelConfig
from services.engine.kv_pool import DTYPES, KVPool
from services.engine.kv_view import KVView
from services.engine.parallel.comm import Groups
from services.engine.parallel.layers import build_rank_model
from services.engine.parallel.plan import StepPlan
from services.engine.parallel.shard import Shard

LOGITS_TAG = 1 << 20  # micro-batch i's hidden states travel with tag i


@dataclass(frozen=True, slots=True)
class RankSpec:
    """What a rank needs to build its part (sent to each rank process as JSON)."""

    model_dir: str
    tp: int
    pp: int
    rank: int
    device: str
    num_blocks: int
    block_size: int
    dtype: str
    pool_path: str | None = None
    ep: int = 0  # expert groups per stage (0: one per TP rank)


def rank_layout(config: ModelConfig, shard: Shard, num_blocks: int, block_size: int, dtype: str) -> KVLayout:
    """The layout of a rank's pool: the instance's blocks, slots for its stage's layers of each group, its KV
    heads."""
    slots = KVGroups.of_model(config, block_size).slots(shard.layers.start, shard.layers.stop)
    return KVLayout(num_blocks, slots, block_size, shard.kv_heads.count, config.head_dim, dtype)


class RankRunner:
    def __init__(self, spec: RankSpec, config: ModelConfig, shard: Shard, groups: Groups, device: torch.device) -> None:
        self.config, self.shard, self.groups, self.device = config, shard, groups, device
        self.dtype = DTYPES[spec.dtype]
        self.block_size = spec.block_size
        self.model = build_rank_model(Path(spec.model_dir), config, shard, device, self.dtype, groups.tp)
        self.layout = rank_layout(config, shard, spec.num_blocks, spec.block_size, spec.dtype)
        self.pool = KVPool(self.layout, device, spec.pool_path, shard.layers, shard.kv_heads)
        self.placement = KVGroups.of_model(config, spec.block_size).placement(shard.layers.start, shard.layers.stop)

    @torch.inference_mode()
    def run(self, plan: StepPlan) -> torch.Tensor | None:
        """Runs this rank's part of the step; rank 0 gets the logits [rows, V] of every micro-batch, in order."""
        s, data = self.shard, self.groups.data
        outs: list[torch.Tensor] = []
        for i, mb in enumerate(plan.micro):
            ids, positions, metas = mb.tensors(self.block_size, self.device)
            if s.first_stage:
                x = self.model.embed(ids, positions)  # [T, hidden]
            else:
                x = torch.empty(mb.num_tokens, self.config.hidden_size, dtype=self.dtype, device=self.device)
                data.recv(x, s.rank_of(s.tp_rank, s.pp_rank - 1), i)
            x = self.model.run_layers(x, positions, KVView(self.pool.tensor, metas, self.placement))
            if not s.last_stage:
                data.send(x, s.rank_of(s.tp_rank, s.pp_rank + 1), i)
            elif s.tp_rank == 0:
                rows = mb.logit_rows(plan.all_logits)
                if rows:
                    outs.append(self.model.compute_logits(self.model.final_norm(x[rows])))  # [rows, V]
        logits = None
        if s.last_stage and s.tp_rank == 0:
            logits = torch.cat(outs) if outs else torch.empty(0, self.config.vocab_size, dtype=self.dtype, device=self.device)
            if s.rank != 0:
                data.send(logits.contiguous(), 0, LOGITS_TAG)
        data.flush()
        if s.rank == 0 and logits is None:
            logits = torch.empty(plan.num_logit_rows(), self.config.vocab_size, dtype=self.dtype, device=self.device)
            data.recv(logits, s.rank_of(0, s.pp - 1), LOGITS_TAG)
        return logits if s.rank == 0 else None

    def close(self) -> None:
        self.pool.close()
