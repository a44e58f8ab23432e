"""Rotary position embeddings (the rotate-half convention of Hugging Face Llama): default, linear, Llama-3 and
LongRoPE scaling, partial rotary, and a table per layer type (Gemma 3's sliding layers have their own base)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from services.common.model_config import ModelConfig
from services.common.yarn import yarn_mscale
from services.engine.attention import AttentionMetadata


@dataclass(slots=True)
class RopeTable:
    """The rotary frequencies of one layer type (float32, as transformers computes them, so angles match)."""

    inv_freq: torch.Tensor  # [rotary_dim / 2]
    long_inv_freq: torch.Tensor | None = None  # LongRoPE: where a sequence reaches past `original_max`
    original_max: int = 0
    scale: float = 1.0  # LongRoPE's attention factor, applied to cos and sin

    def cos_sin(self, positions: torch.Tensor, meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [T] → cos, sin: [T, 1, rotary_dim]."""
        inv_freq = self.inv_freq[None, :]
        if self.long_inv_freq is not None:  # by the length each token's sequence reaches
            long = meta.token_reach(positions.device) > self.original_max
            inv_freq = torch.where(long[:, None], self.long_inv_freq[None, :], inv_freq)
        freqs = positions[:, None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        if self.scale == 1.0:
            return emb.cos(), emb.sin()
        return emb.cos() * self.scale, emb.sin() * self.scale


def rope_table(params: dict, head_dim: int) -> RopeTable:
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    base = params["rope_theta"] ** exponents
    inv_freq = 1.0 / base
    kind = params["rope_type"]
    if kind == "default":
        return RopeTable(inv_freq)
    if kind == "linear":
        return RopeTable(inv_freq / params["factor"])
    if kind == "llama3":
        return RopeTable(_llama3(inv_freq, params))
    if kind == "yarn":
        return _yarn(params, dim, base)
    if kind == "longrope":
        original = params["original_max_position_embeddings"]
        factor = params.get("factor") or params["max_position_embeddings"] / original
        scale = params.get("attention_factor") or (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original)))
        short, long = (1.0 / (torch.tensor(params[f], dtype=torch.float32) * base) for f in ("short_factor", "long_factor"))
        return RopeTable(short, long, original, scale)
    raise ValueError(f"unsupported rope_scaling type {kind!r}")


def rope_tables(config: ModelConfig) -> dict[str, RopeTable]:
    """Layer type → its table, for the layer types the model has."""
    kinds = set(config.layer_types) or set(config.rope)
    dim = config.mla.rope_dim if config.mla is not None else config.head_dim  # MLA rotates a part of each head
    return {kind: rope_table(config.rope[kind], dim) for kind in kinds}


def _yarn(params: dict, dim: int, base: torch.Tensor) -> RopeTable:
    """YaRN (as transformers computes it): frequencies interpolated by `factor` below the ramp between
    `beta_slow` and `beta_fast` rotations over the original context, kept above it; cos and sin scaled by the
    attention factor (`mscale` / `mscale_all_dim` where both are given)."""
    theta, original = params["rope_theta"], params["original_max_position_embeddings"]
    factor = params.get("factor") or params["max_position_embeddings"] / original
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all) if mscale and mscale_all \
            else yarn_mscale(factor)

    def correction(rotations: float) -> float:  # the dimension that turns `rotations` times over the original context
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction(params.get("beta_fast") or 32), correction(params.get("beta_slow") or 1)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)).clamp(0, 1)
    extrapolated = 1 - ramp
    inv_freq = 1.0 / (factor * base) * (1 - extrapolated) + 1.0 / base * extrapolated
    return RopeTable(inv_freq, scale=float(attention))


def _llama3(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos, sin: [T, 1, R], R ≤ D (partial rotary leaves the last D - R channels as they are)."""
    rot = cos.shape[-1]
    if rot < x.shape[-1]:
        return torch.cat((apply_rotary(x[..., :rot], cos, sin), x[..., rot:]), dim=-1)
    half = rot // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
