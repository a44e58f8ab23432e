"""A mixture-of-experts config.json reads as transformers reads it (which layers are sparse, the experts' names and
sizes), and a key the engine would serve differently is refused at load time, naming the key."""

from __future__ import annotations

import pytest

from services.common.model_config import ModelConfig
from services.engine.parallel.shard import ParallelConfigError, check_layout, shard_for

SIZE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 4, "vocab_size": 300, "max_position_embeddings": 2048, "eos_token_id": 2}
MIXTRAL = {"model_type": "mixtral", **SIZE, "num_local_experts": 8, "num_experts_per_tok": 2}
QWEN2_MOE = {"model_type": "qwen2_moe", **SIZE, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "shared_expert_intermediate_size": 48, "decoder_sparse_step": 2, "mlp_only_layers": [3]}


def test_mixtral_routes_every_layer_with_renormalised_weights_over_its_w1_w3_w2_experts() -> None:
    moe = ModelConfig.from_dict(MIXTRAL).moe
    assert moe is not None and (moe.num_experts, moe.top_k, moe.expert_size) == (8, 2, 128)
    assert moe.sparse == (True,) * 4 and moe.renormalize and not moe.shared_size
    assert (moe.block, moe.expert_parts) == ("block_sparse_moe", ("w1", "w3", "w2"))


def test_qwen2_moe_sparse_layers_follow_the_step_and_mlp_only_layers() -> None:
    config = ModelConfig.from_dict(QWEN2_MOE)
    assert config.moe is not None and config.moe.sparse == (False, True, False, False)
    assert config.moe.shared_size == 48 and config.moe.shared_gate and not config.moe.renormalize
    assert config.qkv_bias and not config.o_bias


def test_qwen3_moe_as_transformers_5_writes_it_has_its_experts_under_mixtrals_key() -> None:
    raw = {"model_type": "qwen3_moe", **SIZE, "num_local_experts": 6, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "norm_topk_prob": True, "head_dim": 32}
    config = ModelConfig.from_dict(raw)
    assert config.moe is not None and config.moe.num_experts == 6 and config.moe.renormalize and config.qk_norm


@pytest.mark.parametrize(("raw", "key"), [
    ({**MIXTRAL, "hidden_act": "gelu"}, "hidden_act"),
    ({**MIXTRAL, "num_experts_per_tok": 9}, "num_experts_per_tok"),
    ({**MIXTRAL, "num_local_experts": 0}, "num_local_experts"),
    ({**QWEN2_MOE, "use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ({**QWEN2_MOE, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({**QWEN2_MOE, "norm_topk_prob": "yes"}, "norm_topk_prob"),
    ({**QWEN2_MOE, "shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
])
def test_an_unserved_moe_key_is_refused_naming_it(raw: dict, key: str) -> None:
    with pytest.raises(ValueError, match=f"config.json {key}"):
        ModelConfig.from_dict(raw)


def test_a_pipeline_stage_keeps_the_sparse_flags_of_its_own_layers() -> None:
    config = ModelConfig.from_dict(QWEN2_MOE)
    stages = [shard_for(config, 1, 2, rank).local_config(config).moe for rank in (0, 1)]
    assert [s.sparse for s in stages if s is not None] == [(False, True), (False, False)]


def test_tensor_parallel_moe_is_refused_naming_the_flag() -> None:
    with pytest.raises(ParallelConfigError, match="--tp"):
        check_layout(ModelConfig.from_dict(MIXTRAL), 2, 1)
