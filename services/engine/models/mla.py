"""Multi-head latent attention (DeepSeek-V3) over the paged pool, which keeps per token and layer only the
compressed latent and the rotary key (the entry; its two halves fill the pool's K and V planes of one head).

Prompts attend expanded: the latents of the sequence pass through kv_b_proj into each head's key and value. Decode
steps attend absorbed: W_UK (kv_b_proj's key rows) is folded into the query, so the scores are taken against the
latents themselves, and W_UV is applied to the attention-weighted latent; no per-head K/V is ever formed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.attention import AttentionMetadata
from services.engine.models.linear import Linear
from services.engine.models.llama import RMSNorm
from services.engine.models.rope import apply_rotary

LORA_EPS = 1e-6  # transformers builds the q_a and kv_a norms with their default eps, not rms_norm_eps


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """x: [T, heads, R]; DeepSeek's interleaved pairs (x0, x1), (x2, x3)... come out in rotate-half order."""
    if not interleaved:
        return apply_rotary(x, cos, sin)
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * cos - odd * sin, odd * cos + even * sin), dim=-1)


def _entries(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """The entries of `blocks` in order: cache [N, 2, 1, bs, E/2] → [len(blocks) · bs, E]."""
    planes = cache.index_select(0, blocks)[:, :, 0]  # [nb, 2, bs, E/2]
    return planes.transpose(1, 2).flatten(2).flatten(0, 1)


class MLAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        m = c.mla
        assert m is not None
        self.m, self.num_heads = m, c.num_heads
        qk = m.nope_dim + m.rope_dim
        if m.q_lora_rank is None:
            self.q_proj = Linear(c.hidden_size, c.num_heads * qk, bias=False)
        else:
            self.q_a_proj = Linear(c.hidden_size, m.q_lora_rank, bias=c.qkv_bias)
            self.q_a_layernorm = RMSNorm(m.q_lora_rank, LORA_EPS)
            self.q_b_proj = Linear(m.q_lora_rank, c.num_heads * qk, bias=False)
        self.kv_a_proj_with_mqa = Linear(c.hidden_size, m.entry, bias=c.qkv_bias)
        self.kv_a_layernorm = RMSNorm(m.kv_lora_rank, LORA_EPS)
        self.kv_b_proj = Linear(m.kv_lora_rank, c.num_heads * (m.nope_dim + m.v_dim), bias=False)
        self.o_proj = Linear(c.num_heads * m.v_dim, c.hidden_size, bias=c.qkv_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        m, tokens = self.m, x.shape[0]  # x: [T, hidden]
        q = self.q_proj(x) if m.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_rot = q.view(tokens, self.num_heads, -1).split([m.nope_dim, m.rope_dim], -1)
        latent, k_rot = self.kv_a_proj_with_mqa(x).split([m.kv_lora_rank, m.rope_dim], -1)
        q_rot = rotate(q_rot, cos, sin, m.interleaved)
        entry = torch.cat((self.kv_a_layernorm(latent), rotate(k_rot[:, None], cos, sin, m.interleaved)[:, 0]), -1)
        half = m.entry // 2
        cache[meta.slot_blocks, 0, 0, meta.slot_offsets] = entry[:, :half]
        cache[meta.slot_blocks, 1, 0, meta.slot_offsets] = entry[:, half:]
        if meta.is_decode:
            out = self._absorbed(q_nope, q_rot, cache, meta)
        else:
            out = self._expanded(q_nope, q_rot, entry, cache, meta)
        return self.o_proj(out.reshape(tokens, -1))

    def _expanded(self, q_nope: torch.Tensor, q_rot: torch.Tensor, entry: torch.Tensor, cache: torch.Tensor,
                  meta: AttentionMetadata) -> torch.Tensor:
        """Prompts and chunks, per sequence: its latents expanded into per-head keys and values → [T, H, v_dim]."""
        m, q = self.m, torch.cat((q_nope, q_rot), -1)
        outs, pos = [], 0
        for n, start, table in zip(meta.q_lens, meta.starts, meta.block_tables):
            total = start + n
            seq = entry[pos : pos + n] if start == 0 else _entries(cache, torch.tensor(table, device=q.device))[:total]
            kv = self.kv_b_proj(seq[:, : m.kv_lora_rank]).view(total, self.num_heads, -1)
            k_nope, v = kv.split([m.nope_dim, m.v_dim], -1)
            k = torch.cat((k_nope, seq[:, None, m.kv_lora_rank :].expand(-1, self.num_heads, -1)), -1)
            # query i (absolute position start + i) sees keys 0..start + i
            mask = torch.arange(total, device=q.device)[None, :] <= (start + torch.arange(n, device=q.device))[:, None]
            out = F.scaled_dot_product_attention(q[pos : pos + n].transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                 v.transpose(0, 1)[None], attn_mask=mask, scale=m.scale)
            outs.append(out[0].transpose(0, 1))
            pos += n
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def _absorbed(self, q_nope: torch.Tensor, q_rot: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """A decode batch against the latents: scores q·W_UK·latent + q_rot·k_rot, output W_UV·(p·latent) → [B, H, v_dim]."""
        m = self.m
        table, lens = meta.decode_table, meta.decode_lens  # [B, nb], [B]
        assert table is not None and lens is not None
        batch = table.shape[0]
        w = self.kv_b_proj.weight.view(self.num_heads, m.nope_dim + m.v_dim, m.kv_lora_rank)
        q_latent = torch.einsum("bhn,hnr->bhr", q_nope, w[:, : m.nope_dim])  # W_UK folded into the query
        entries = _entries(cache, table.flatten()).view(batch, -1, m.entry)  # [B, L, E]
        mask = torch.arange(entries.shape[1], device=lens.device)[None, :] < lens[:, None]  # [B, L]
        # the H query heads attend as H queries of one shared key/value head: the entry, and its latent part
        out = F.scaled_dot_product_attention(torch.cat((q_latent, q_rot), -1)[:, None], entries[:, None],
                                             entries[:, None, :, : m.kv_lora_rank], attn_mask=mask[:, None, None, :],
                                             scale=m.scale)  # [B, 1, H, R]
        return torch.einsum("bhr,hvr->bhv", out[:, 0], w[:, m.nope_dim :])  # W_UV after
