"""Multi-head latent attention (DeepSeek-V3) read from `config.json`: the low-rank query and KV projections and the
decoupled rotary key. Per token and layer the KV pool holds the compressed latent (`kv_lora_rank` values) and the
rotary key (`qk_rope_head_dim`), nothing per head."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.yarn import yarn_mscale

MLA_TYPES = ("deepseek_v3",)
_DEFAULTS = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
             "v_head_dim": 128, "rope_interleave": True}  # transformers' DeepseekV3Config


@dataclass(frozen=True, slots=True)
class MLAConfig:
    kv_lora_rank: int  # the latent's width
    q_lora_rank: int | None  # the query's low rank (None: one q_proj)
    rope_dim: int  # qk_rope_head_dim: the rotary part of each query and of the one shared key
    nope_dim: int  # qk_nope_head_dim: each head's key part expanded from the latent
    v_dim: int  # v_head_dim
    interleaved: bool  # rotary over interleaved pairs (DeepSeek's layout)
    mscale: float = 1.0  # YaRN's `mscale_all_dim` scale, applied twice to the scores (as DeepSeek's reference)

    @property
    def entry(self) -> int:
        """Values one token keeps per layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.rope_dim

    @property
    def scale(self) -> float:
        return (self.nope_dim + self.rope_dim) ** -0.5 * self.mscale * self.mscale


def mla_config(raw: dict) -> MLAConfig:
    raw = {**_DEFAULTS, **raw}
    for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        if not isinstance(raw[key], int) or raw[key] < 1:
            raise ValueError(f"config.json {key}: {raw[key]!r} is not a positive integer")
    if raw["q_lora_rank"] is not None and (not isinstance(raw["q_lora_rank"], int) or raw["q_lora_rank"] < 1):
        raise ValueError(f"config.json q_lora_rank: {raw['q_lora_rank']!r} is neither null nor a positive integer")
    if (raw["kv_lora_rank"] + raw["qk_rope_head_dim"]) % 2:  # the pool holds the entry as two halves (engine.md)
        raise ValueError(f"config.json kv_lora_rank: {raw['kv_lora_rank']} + qk_rope_head_dim is odd")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    mscale = yarn_mscale(rope["factor"], rope["mscale_all_dim"]) \
        if rope.get("rope_type", rope.get("type")) == "yarn" and rope.get("mscale_all_dim") else 1.0
    return MLAConfig(raw["kv_lora_rank"], raw["q_lora_rank"], raw["qk_rope_head_dim"], raw["qk_nope_head_dim"],
                     raw["v_head_dim"], bool(raw["rope_interleave"]), mscale)
