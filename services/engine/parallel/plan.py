"""A step's plan as plain lists, broadcast by rank 0: micro-batches of sequences, their tokens and blocks.

Block ids are the scheduler's: identical on every rank, each rank's pool holding its own heads and layers of
the same block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.engine.attention import AttentionMetadata
from services.engine.kv_view import group_metadata
from services.engine.scheduler import ScheduledSeq, SchedulerOutput


@dataclass(slots=True)
class MicroPlan:
    """One micro-batch: the sequences it advances, in order, flattened as the model takes them."""

    token_ids: list[int]            # [T] the new tokens of every sequence, in order
    q_lens: list[int]               # [B] new tokens per sequence
    starts: list[int]               # [B] tokens already cached per sequence
    block_tables: list[list[list[int]]]  # [B][group][blocks] each sequence's blocks
    samples: list[bool]             # [B] whether its last new token's logits are wanted
    reach: list[int]                # [B] the longer of its prompt and its tokens after this step

    @classmethod
    def of(cls, items: list[ScheduledSeq]) -> MicroPlan:
        ids: list[int] = []
        for it in items:
            start = it.seq.num_computed
            ids.extend(it.seq.token_slice(start, start + it.num_new))
        return cls(ids, [it.num_new for it in items], [it.seq.num_computed for it in items],
                   [[list(t) for t in it.seq.block_tables] for it in items], [it.samples for it in items],
                   [it.reach for it in items])

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 and s > 0 for n, s in zip(self.q_lens, self.starts))

    def logit_rows(self, all_positions: bool) -> list[int]:
        """Rows of the hidden states [T, hidden] whose logits go back to rank 0."""
        if all_positions:
            return list(range(self.num_tokens))
        ends, rows = 0, []
        for n, wanted in zip(self.q_lens, self.samples):
            ends += n
            if wanted:
                rows.append(ends - 1)
        return rows

    def tensors(self, block_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[AttentionMetadata]]:
        """input_ids [T], positions [T] and the attention metadata of each layer group for this micro-batch."""
        positions = [pos for n, start in zip(self.q_lens, self.starts) for pos in range(start, start + n)]
        metas = group_metadata(self.q_lens, self.starts, self.block_tables, self.reach, block_size, device)
        return torch.tensor(self.token_ids, device=device), torch.tensor(positions, device=device), metas


@dataclass(slots=True)
class StepPlan:
    """What every rank runs this step; None on the wire means: shut down."""

    micro: list[MicroPlan]
    all_logits: bool = False  # every position's logits (a correctness check), not only the sampling rows

    @classmethod
    def of(cls, batch: SchedulerOutput, parts: int) -> StepPlan:
        return cls([MicroPlan.of(group) for group in split_items(batch.items, parts)])

    def num_logit_rows(self) -> int:
        return sum(len(m.logit_rows(self.all_logits)) for m in self.micro)


def split_items(items: list[ScheduledSeq], parts: int) -> list[list[ScheduledSeq]]:
    """Up to `parts` contiguous groups of sequences with about equal token counts (a sequence is never split)."""
    parts = max(1, min(parts, len(items)))
    total = sum(it.num_new for it in items)
    groups: list[list[ScheduledSeq]] = [[]]
    done = 0
    for i, it in enumerate(items):
        left_items, left_groups = len(items) - i, parts - len(groups)
        # close the group once it reached its share, or when each remaining group needs one of the remaining items
        if groups[-1] and left_groups > 0 and (done >= total * len(groups) / parts or left_items <= left_groups):
            groups.append([])
        groups[-1].append(it)
        done += it.num_new
    return groups
