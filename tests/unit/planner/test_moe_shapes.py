"""The planner's shapes of mixture-of-experts and latent-attention models, from their published config.json: the
parameters memory holds (every expert), the parameters a token passes through, and KV bytes per token from the
architecture (DeepSeek-V3's latent and rotary key, not K/V heads)."""

from __future__ import annotations

import pytest

from services.planner.shapes import shape_from_config

MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
               "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
               "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8,
               "topk_group": 4, "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
               "scoring_func": "sigmoid", "topk_method": "noaux_tc", "max_position_embeddings": 163840}


@pytest.mark.parametrize(("config", "total", "active"), [(MIXTRAL_8X7B, 46.7e9, 12.9e9), (DEEPSEEK_V3, 671e9, 37e9)])
def test_total_and_active_parameters_are_the_published_ones(config: dict, total: float, active: float) -> None:
    shape = shape_from_config(config, config["model_type"])
    assert shape.params == pytest.approx(total, rel=0.02)  # one embedding counted (an untied head adds < 1%)
    assert shape.active_params == pytest.approx(active, rel=0.03)


def test_deepseek_v3_keeps_its_latent_per_token_71x_fewer_bytes_than_its_heads() -> None:
    shape = shape_from_config(DEEPSEEK_V3, "deepseek-v3")
    assert shape.kv_bytes_per_token(2) == 61 * (512 + 64) * 2
    heads = 61 * 128 * ((128 + 64) + 128) * 2  # what full K and V heads of the same model would hold
    assert heads / shape.kv_bytes_per_token(2) == pytest.approx(71.1, abs=0.1)
