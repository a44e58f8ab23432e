"""Attention over the paged KV pool: store the new tokens' K/V, then attend over each sequence's blocks.

Two paths: a batched one when every sequence adds one token (decode; on CPU a C kernel that reads the
blocks where they lie), and a per-sequence one for prompts and prompt chunks (which may continue after
already-cached tokens, as chunked prefill does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from services.engine.cpu import paged_attention as cpu_attention


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

    @property
    def is_decode(self) -> bool:
        return self.decode_table is not None


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """q: [T, H, D], k/v: [T, KVH, D], cache: one layer of the pool [N, 2, KVH, bs, D] → [T, H, D]."""
    cache[meta.slot_blocks, 0, :, meta.slot_offsets] = k
    cache[meta.slot_blocks, 1, :, meta.slot_offsets] = v
    if meta.is_decode:
        return _decode_attention(q, cache, meta, scale)
    gqa = q.shape[1] != k.shape[1]
    outs = []
    pos = 0
    # 4-D [1, heads, n, D] inputs: torch's CPU flash kernel takes only those (3-D falls back to the slow math path)
    for n, start, table in zip(meta.q_lens, meta.starts, meta.block_tables):
        qs = q[pos : pos + n].transpose(0, 1)[None]
        if start == 0:
            ks, vs = k[pos : pos + n].transpose(0, 1)[None], v[pos : pos + n].transpose(0, 1)[None]
            out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=gqa)
        else:
            total = start + n
            blocks = torch.tensor(table, device=q.device)
            kv = cache.index_select(0, blocks).permute(1, 2, 0, 3, 4).flatten(2, 3)[:, :, :total]  # [2, KVH, total, D]
            ks, vs = kv[0][None], kv[1][None]
            # query i (absolute position start + i) sees keys 0..start + i
            mask = torch.arange(total, device=q.device)[None, :] <= (start + torch.arange(n, device=q.device))[:, None]
            out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale, enable_gqa=gqa)
        outs.append(out[0].transpose(0, 1))
        pos += n
    return torch.cat(outs) if len(outs) > 1 else outs[0]


def _decode_attention(q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    if cpu_attention.takes(q, cache):
        assert meta.decode_table is not None and meta.decode_lens is not None  # is_decode
        return cpu_attention.paged_decode_attention(q, cache, meta.decode_table, meta.decode_lens, scale)
    return gathered_decode_attention(q, cache, meta, scale)


def gathered_decode_attention(q: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Decode attention in torch ops (any device and dtype): gathers the batch's blocks, then one SDPA."""
    table, lens = meta.decode_table, meta.decode_lens  # [B, nb], [B]
    assert table is not None and lens is not None, "decode attention over a batch that is not all decodes"
    batch, nb = table.shape
    _, _, kvh, bs, d = cache.shape
    # One gather of the batch's blocks, then K and V as contiguous [B, KVH, L, D] so the matmuls read rows.
    kv = cache.index_select(0, table.flatten()).view(batch, nb, 2, kvh, bs, d)
    k, v = kv.permute(2, 0, 3, 1, 4, 5).reshape(2, batch, kvh, nb * bs, d)
    mask = torch.arange(nb * bs, device=q.device)[None, :] < lens[:, None]  # [B, L]
    # The G query heads sharing a KV head attend as G queries of that head: GQA without repeating K/V.
    out = F.scaled_dot_product_attention(q.view(batch, kvh, -1, d), k, v, attn_mask=mask[:, None, None, :], scale=scale)
    return out.reshape(batch, -1, d)  # [B, H, D]
