"""Owns the model and its KV pool on one device; turns a SchedulerOutput into sampled tokens.

Makes no scheduling decision: it builds the flattened batch tensors, runs the model, and samples.
"""

from __future__ import annotations

from pathlib import Path

import torch

from services.common.kv_layout import KVLayout
from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata
from services.engine.device import keep_freed_memory
from services.engine.kv_pool import KVPool
from services.engine.models import materialize
from services.engine.models.linear import use_small_gemm
from services.engine.sampler import sample
from services.engine.scheduler import SchedulerOutput
from services.engine.weights import load_weights


class ModelRunner:
    def __init__(self, model_dir: str | Path, config: ModelConfig, layout: KVLayout, device: torch.device,
                 pool_path: str | None = None) -> None:
        self.config = config
        self.device = device
        self.block_size = layout.block_size
        if device.type == "cpu":
            keep_freed_memory()
        model = materialize(config, device, getattr(torch, layout.dtype))
        load_weights(model, model_dir)
        if device.type == "cpu":
            use_small_gemm(model)
        self.model = model.eval()
        self.pool = KVPool(layout, device, pool_path)

    def _metadata(self, batch: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        ids: list[int] = []
        positions: list[int] = []
        slot_blocks: list[int] = []
        slot_offsets: list[int] = []
        bs = self.block_size
        for it in batch.items:
            seq, start = it.seq, it.seq.num_computed
            ids.extend(seq.token_slice(start, start + it.num_new))
            for pos in range(start, start + it.num_new):
                positions.append(pos)
                slot_blocks.append(seq.block_table[pos // bs])
                slot_offsets.append(pos % bs)
        dev = self.device
        meta = AttentionMetadata(
            q_lens=[it.num_new for it in batch.items],
            starts=[it.seq.num_computed for it in batch.items],
            block_tables=[it.seq.block_table for it in batch.items],
            slot_blocks=torch.tensor(slot_blocks, device=dev),
            slot_offsets=torch.tensor(slot_offsets, device=dev),
        )
        if batch.is_decode:
            width = max(len(it.seq.block_table) for it in batch.items)
            table = [it.seq.block_table + [0] * (width - len(it.seq.block_table)) for it in batch.items]
            meta.decode_table = torch.tensor(table, device=dev)
            meta.decode_lens = torch.tensor([it.seq.num_computed + 1 for it in batch.items], device=dev)
        return torch.tensor(ids, device=dev), torch.tensor(positions, device=dev), meta

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput) -> list[int]:
        """Computes the batch's K/V and returns one sampled token per item that finished its prompt/step."""
        input_ids, positions, meta = self._metadata(batch)
        hidden = self.model(input_ids, positions, self.pool.tensor, meta)  # [T, hidden]
        ends = torch.tensor(meta.q_lens, device=self.device).cumsum(0) - 1
        sampling = [i for i, it in enumerate(batch.items) if it.samples]
        if not sampling:
            return []
        logits = self.model.compute_logits(hidden[ends[sampling]])  # [B, V]
        return sample(logits, [batch.items[i].seq for i in sampling])

    @torch.inference_mode()
    def full_logits(self, input_ids: list[int], block_table: list[int]) -> torch.Tensor:
        """All-position logits of one prompt through the paged path (a correctness check against references)."""
        n = len(input_ids)
        bs = self.block_size
        meta = AttentionMetadata([n], [0], [block_table],
                                 torch.tensor([block_table[p // bs] for p in range(n)], device=self.device),
                                 torch.arange(n, device=self.device) % bs)
        hidden = self.model(torch.tensor(input_ids, device=self.device), torch.arange(n, device=self.device), self.pool.tensor, meta)
        return self.model.compute_logits(hidden)

    def lost_rank(self) -> str | None:
        """One process, no rank to lose (a TP/PP runner says which rank exited)."""
        return None

    def close(self) -> None:
        self.pool.close()
