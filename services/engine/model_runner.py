"""Owns the model and its KV pool on one device; turns a SchedulerOutput into sampled tokens.

Makes no scheduling decision: it builds the flattened batch tensors, runs the model, and samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.model_config import ModelConfig
from services.common.sampling import TokenLogprobs
from services.common.span import Span
from services.engine.attention import AttentionMetadata
from services.engine.device import keep_freed_memory
from services.engine.kv_pool import KVPool
from services.engine.kv_view import KVView, group_metadata, split_tables
from services.engine.models import materialize
from services.engine.models.linear import use_small_gemm
from services.engine.sampler import Sampled, sample, token_logprobs
from services.engine.scheduler import SchedulerOutput
from services.engine.sequence import Sequence
from services.engine.weights import load_weights


@dataclass(frozen=True, slots=True)
class PromptPositions:
    """A step's positions [first, last) of a sequence whose next prompt tokens' logprobs are asked."""

    seq: Sequence
    first: int
    last: int


class ModelRunner:
    def __init__(self, model_dir: str | Path, config: ModelConfig, layout: KVLayout, groups: KVGroups,
                 device: torch.device, pool_path: str | None = None) -> None:
        self.config = config
        self.groups = groups
        self.placement = groups.placement(0, config.num_layers)
        self.device = device
        self.block_size = layout.block_size
        if device.type == "cpu":
            keep_freed_memory()
        model = materialize(config, device, getattr(torch, layout.dtype))
        load_weights(model, model_dir)
        if device.type == "cpu":
            use_small_gemm(model)
        self.model = model.eval()
        self.pool = KVPool(layout, device, pool_path, Span(0, config.num_layers))

    def _inputs(self, batch: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, KVView]:
        ids: list[int] = []
        positions: list[int] = []
        for it in batch.items:
            start = it.seq.num_computed
            ids.extend(it.seq.token_slice(start, start + it.num_new))
            positions.extend(range(start, start + it.num_new))
        metas = group_metadata([it.num_new for it in batch.items], [it.seq.num_computed for it in batch.items],
                               [it.seq.block_tables for it in batch.items], [it.reach for it in batch.items],
                               self.block_size, self.device)
        dev = self.device
        return torch.tensor(ids, device=dev), torch.tensor(positions, device=dev), self._view(metas)

    def _view(self, metas: list[AttentionMetadata]) -> KVView:
        return KVView(self.pool.tensor, metas, self.placement)

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput) -> Sampled:
        """Computes the batch's K/V and returns one sampled token per item that finished its prompt/step."""
        input_ids, positions, kv = self._inputs(batch)
        hidden = self.model(input_ids, positions, kv)  # [T, hidden]
        ends = torch.tensor(kv.meta.q_lens, device=self.device).cumsum(0) - 1
        sampling = [i for i, it in enumerate(batch.items) if it.samples]
        sampled = sample(self.model.compute_logits(hidden[ends[sampling]]), [batch.items[i].seq for i in sampling],
                         self.config.eos_token_ids) if sampling else Sampled()
        sampled.prompt_logprobs = self._prompt_logprobs(batch, hidden)
        return sampled

    def _prompt_logprobs(self, batch: SchedulerOutput, hidden: torch.Tensor) -> dict[str, list[TokenLogprobs]]:
        """The logprobs of the prompt tokens that this step's positions predict, for the requests that ask: the
        logits of those rows only (none when no request asks), each prompt token once (chunks, recomputes)."""
        rows: list[int] = []
        wanted: list[PromptPositions] = []
        offset = 0
        for it in batch.items:
            seq = it.seq
            if seq.params.prompt_logprobs is not None:
                first = max(seq.num_computed, len(seq.prompt_logprobs))
                last = min(seq.num_computed + it.num_new, len(seq.prompt_ids) - 1)  # position p predicts token p + 1
                if first < last:
                    rows.extend(range(offset + first - seq.num_computed, offset + last - seq.num_computed))
                    wanted.append(PromptPositions(seq, first, last))
            offset += it.num_new
        if not rows:
            return {}
        logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])  # [R, V]
        items = iter(token_logprobs(logits, [t for w in wanted for t in w.seq.prompt_ids[w.first + 1 : w.last + 1]],
                                   [w.seq.params.prompt_logprobs for w in wanted for _ in range(w.first, w.last)]))
        return {w.seq.request_id: [next(items) for _ in range(w.first, w.last)] for w in wanted}

    @torch.inference_mode()
    def full_logits(self, input_ids: list[int], blocks: list[int]) -> torch.Tensor:
        """All-position logits of one prompt through the paged path (a correctness check against references);
        `blocks`: the prompt's table of each layer group in turn."""
        n = len(input_ids)
        tables = split_tables(blocks, self.groups.count, n, self.block_size)
        kv = self._view(group_metadata([n], [0], [tables], None, self.block_size, self.device))
        hidden = self.model(torch.tensor(input_ids, device=self.device), torch.arange(n, device=self.device), kv)
        return self.model.compute_logits(hidden)

    def copy_block(self, src: int, dst: int) -> None:
        """Copies one KV block (its group's layers): a choice's own copy of the block holding its shared prompt's end."""
        self.pool.tensor[dst].copy_(self.pool.tensor[src])

    def lost_rank(self) -> str | None:
        """One process, no rank to lose (a TP/PP runner says which rank exited)."""
        return None

    def close(self) -> None:
        self.pool.close()
