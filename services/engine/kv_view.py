"""A step's view of the KV pool for the model's layers: each layer's slot of the pool and its layer group's
attention metadata (services/common/kv_groups.py). Built by the one-process runner and by every TP/PP rank."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.engine.attention import AttentionMetadata


@dataclass(slots=True)
class KVView:
    pool: torch.Tensor  # [N, slots, 2, KVH, bs, D]
    metas: list[AttentionMetadata]  # per layer group
    placement: tuple[tuple[int, int], ...]  # per layer the model holds: (group, slot)

    def layer(self, i: int) -> tuple[torch.Tensor, AttentionMetadata]:
        """The pool slot [N, 2, KVH, bs, D] and the metadata of the model's i-th layer."""
        group, slot = self.placement[i]
        return self.pool[:, slot], self.metas[group]

    @property
    def meta(self) -> AttentionMetadata:
        """What every group's metadata shares (lengths, starts, reach): the first one's."""
        return self.metas[0]


def group_metadata(q_lens: list[int], starts: list[int], tables: list[list[list[int]]], reach: list[int] | None,
                   block_size: int, device: torch.device) -> list[AttentionMetadata]:
    """One AttentionMetadata per layer group; `tables`: [sequence][group][block]. A decode batch's padded tables read
    block 0 where a sliding group holds none (out of the window: masked, never read)."""
    offsets = [pos % block_size for n, s in zip(q_lens, starts) for pos in range(s, s + n)]
    slot_offsets = torch.tensor(offsets, device=device)
    decode = all(n == 1 and s > 0 for n, s in zip(q_lens, starts))
    metas = []
    for g in range(len(tables[0])):
        group = [t[g] for t in tables]
        slot_blocks = [table[pos // block_size] for n, s, table in zip(q_lens, starts, group) for pos in range(s, s + n)]
        meta = AttentionMetadata(list(q_lens), list(starts), group, torch.tensor(slot_blocks, device=device),
                                 slot_offsets, reach=reach)
        if decode:
            width = max(len(t) for t in group)
            padded = torch.tensor([t + [0] * (width - len(t)) for t in group], device=device)
            meta.decode_table = padded.clamp_(min=0)  # a sliding group's NULL_BLOCK (-1) reads block 0
            meta.decode_lens = torch.tensor([s + 1 for s in starts], device=device)
        metas.append(meta)
    return metas


def split_tables(blocks: list[int], num_groups: int, num_tokens: int, block_size: int) -> list[list[int]]:
    """A prompt's table of each layer group, taken from `blocks` in turn (`full_logits`' argument)."""
    nb = -(-num_tokens // block_size)
    if len(blocks) < num_groups * nb:
        raise ValueError(f"{len(blocks)} blocks for {num_groups} layer groups of {nb} blocks each")
    return [blocks[g * nb:(g + 1) * nb] for g in range(num_groups)]
