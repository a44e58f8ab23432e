"""Attention over the paged KV pool: store the new tokens' K/V, then attend over each sequence's blocks.

Two paths: a batched one when every sequence adds one token (decode; on CPU a C kernel that reads the
blocks where they lie), and a per-sequence one for prompts and prompt chunks (which may continue after
already-cached tokens, as chunked prefill does). A layer's `AttentionSpec` adds a sliding window (its blocks
before the window are not read) or Gemma 2's score soft-capping (plain torch ops there: SDPA takes no cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from services.engine.cpu import paged_attention as cpu_attention

WINDOW_PIECE = 256  # a sliding layer's long prompt attends in query pieces of at least this many (`_windowed_prompt`)


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """How one layer attends: score scale, the keys a query sees, score capping."""

    scale: float
    window: int | None = None  # a query sees the last `window` positions, itself included
    softcap: float | None = None  # scores → softcap · tanh(scores / softcap) before the mask


@dataclass(slots=True)
class AttentionMetadata:
    """Where a flattened batch's tokens come from and where their K/V go."""

    q_lens: list[int]               # new tokens per sequence, in batch order
    starts: list[int]               # tokens already cached per sequence before this step
    block_tables: list[list[int]]   # each sequence's blocks, covering starts + q_lens tokens
    slot_blocks: torch.Tensor       # [T] block id per new token
    slot_offsets: torch.Tensor      # [T] offset inside the block per new token
    decode_table: torch.Tensor | None = None  # [B, max_blocks] padded tables (all-decode batches)
    decode_lens: torch.Tensor | None = None   # [B] context length after this step
    reach: list[int] | None = None  # [B] the longer of prompt and tokens after this step (LongRoPE's choice)

    def token_reach(self, device: torch.device) -> torch.Tensor:
        """[T] each new token's sequence reach (without `reach` given: its tokens after this step)."""
        reach = self.reach or [s + n for s, n in zip(self.starts, self.q_lens)]
        return torch.tensor(reach, device=device).repeat_interleave(torch.tensor(self.q_lens, device=device))

    @property
    def is_decode(self) -> bool:
        return self.decode_table is not None


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, spec: AttentionSpec
) -> torch.Tensor:
    """q: [T, H, D], k/v: [T, KVH, D], cache: one layer of the pool [N, 2, KVH, bs, D] → [T, H, D]."""
    cache[meta.slot_blocks, 0, :, meta.slot_offsets] = k
    cache[meta.slot_blocks, 1, :, meta.slot_offsets] = v
    if meta.is_decode:
        assert meta.decode_table is not None and meta.decode_lens is not None  # is_decode
        if cpu_attention.takes(q, cache):
            return cpu_attention.paged_decode_attention(q, cache, meta.decode_table, meta.decode_lens, spec.scale,
                                                        spec.window, spec.softcap)
        return gathered_decode_attention(q, cache, meta, spec)
    gqa = q.shape[1] != k.shape[1]
    bs = cache.shape[3]
    outs = []
    pos = 0
    # 4-D [1, heads, n, D] inputs: torch's CPU flash kernel takes only those (3-D falls back to the slow math path)
    for n, start, table in zip(meta.q_lens, meta.starts, meta.block_tables):
        qs = q[pos : pos + n].transpose(0, 1)[None]
        total = start + n
        # the first block holding a key the first query sees (a sliding window's earlier blocks are not read)
        first = max(0, start + 1 - spec.window) // bs if spec.window is not None else 0
        if start == 0:
            ks, vs = k[pos : pos + n].transpose(0, 1)[None], v[pos : pos + n].transpose(0, 1)[None]
        else:
            blocks = torch.tensor(table[first:], device=q.device)
            kv = cache.index_select(0, blocks).permute(1, 2, 0, 3, 4).flatten(2, 3)[:, :, : total - first * bs]
            ks, vs = kv[0][None], kv[1][None]  # [1, KVH, keys, D]
        if spec.window is not None and n > max(spec.window, WINDOW_PIECE):
            out = _windowed_prompt(qs, ks, vs, first * bs, start, spec, gqa)
        else:
            causal_only = start == 0 and (spec.window is None or spec.window >= n)
            mask = None if causal_only else _prompt_mask(first * bs, start, n, spec.window, q.device)
            out = _attend(qs, ks, vs, mask, spec, gqa)
        outs.append(out[0].transpose(0, 1))
        pos += n
    return torch.cat(outs) if len(outs) > 1 else outs[0]


def _windowed_prompt(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: int, start: int, spec: AttentionSpec,
                     gqa: bool) -> torch.Tensor:
    """A long prompt's attention in a sliding-window layer, its queries [1, H, n, D] (positions from `start`) in
    pieces of max(window, WINDOW_PIECE), each over the keys its window reaches (k, v: [1, KVH, keys, D] from
    position `first`): about 2·n·window scores instead of the whole prompt's n², as the planner's latency terms
    count it (`services/common/step_model/attended.py`)."""
    assert spec.window is not None
    n, piece = q.shape[2], max(spec.window, WINDOW_PIECE)
    outs = []
    for lo in range(0, n, piece):
        hi = min(n, lo + piece)
        keys_from = max(first, start + lo - spec.window + 1)
        ks, vs = k[:, :, keys_from - first : start + hi - first], v[:, :, keys_from - first : start + hi - first]
        mask = _prompt_mask(keys_from, start + lo, hi - lo, spec.window, q.device)
        outs.append(_attend(q[:, :, lo:hi], ks, vs, mask, spec, gqa))
    return torch.cat(outs, dim=2)


def _prompt_mask(first: int, start: int, n: int, window: int | None, device: torch.device) -> torch.Tensor:
    """[n, start + n - first]: query i (absolute position start + i) sees the keys from position `first` on up to
    itself, the last `window` of them."""
    keys = torch.arange(first, start + n, device=device)[None, :]
    queries = start + torch.arange(n, device=device)[:, None]
    mask = keys <= queries
    return mask & (keys > queries - window) if window is not None else mask


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, spec: AttentionSpec,
            gqa: bool) -> torch.Tensor:
    """SDPA over [..., heads, L, D] (causal where no mask is given), or its soft-capped form in plain ops."""
    if spec.softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=spec.scale,
                                              enable_gqa=gqa)
    if gqa:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, -3), v.repeat_interleave(group, -3)
    scores = torch.tanh(q @ k.transpose(-1, -2) * spec.scale / spec.softcap) * spec.softcap  # transformers' order
    if mask is None:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def gathered_decode_attention(q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, spec: AttentionSpec) -> torch.Tensor:
    """Decode attention in torch ops (any device and dtype): gathers the batch's blocks, then one SDPA."""
    table, lens = meta.decode_table, meta.decode_lens  # [B, nb], [B]
    assert table is not None and lens is not None, "decode attention over a batch that is not all decodes"
    _, _, kvh, bs, d = cache.shape
    first = torch.zeros_like(lens)  # each sequence's first block read: a sliding window's first
    if spec.window is not None and -(-spec.window // bs) + 1 < table.shape[1]:
        first = (lens - spec.window).clamp(min=0) // bs
        index = first[:, None] + torch.arange(-(-spec.window // bs) + 1, device=q.device)  # the window's blocks
        table = table.gather(1, index.clamp(max=table.shape[1] - 1))  # past a table's end: masked below
    batch, nb = table.shape
    # One gather of the batch's blocks, then K and V as contiguous [B, KVH, L, D] so the matmuls read rows.
    kv = cache.index_select(0, table.flatten()).view(batch, nb, 2, kvh, bs, d)
    k, v = kv.permute(2, 0, 3, 1, 4, 5).reshape(2, batch, kvh, nb * bs, d)
    keys = first[:, None] * bs + torch.arange(nb * bs, device=q.device)[None, :]  # [B, L] absolute positions
    mask = keys < lens[:, None]
    if spec.window is not None:
        mask &= keys >= lens[:, None] - spec.window
    # The G query heads sharing a KV head attend as G queries of that head: GQA without repeating K/V.
    out = _attend(q.view(batch, kvh, -1, d), k, v, mask[:, None, None, :], spec, gqa=False)
    return out.reshape(batch, -1, d)  # [B, H, D]
