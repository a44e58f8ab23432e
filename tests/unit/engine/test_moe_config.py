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
DEEPSEEK_V3 = {"model_type": "deepseek_v3", **SIZE, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4,
               "topk_group": 2, "first_k_dense_replace": 1, "moe_intermediate_size": 32, "kv_lora_rank": 32,
               "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
               "scoring_func": "sigmoid", "topk_method": "noaux_tc"}


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


def test_deepseek_v3_pool_holds_one_latent_and_rotary_key_per_token_and_layer() -> None:
    config = ModelConfig.from_dict(DEEPSEEK_V3)
    assert config.mla is not None and config.moe is not None
    assert config.num_kv_heads * 2 * config.head_dim == 32 + 8  # the pool's K and V planes of its one head
    assert config.moe.sparse == (False, True, True, True) and config.moe.scaling == 2.5 and config.moe.renormalize
    assert (config.moe.groups, config.moe.top_groups, config.moe.shared_size) == (4, 2, 32)


@pytest.mark.parametrize(("raw", "key"), [
    ({**DEEPSEEK_V3, "scoring_func": "softmax"}, "scoring_func"),
    ({**DEEPSEEK_V3, "topk_method": "group_limited_greedy"}, "topk_method"),
    ({**DEEPSEEK_V3, "moe_layer_freq": 2}, "moe_layer_freq"),
    ({**DEEPSEEK_V3, "n_group": 3}, "n_group"),
    ({**DEEPSEEK_V3, "topk_group": 5}, "topk_group"),
    ({**DEEPSEEK_V3, "num_experts_per_tok": 5}, "num_experts_per_tok"),
    ({**DEEPSEEK_V3, "kv_lora_rank": 31}, "kv_lora_rank"),
    ({**DEEPSEEK_V3, "q_lora_rank": 0}, "q_lora_rank"),
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


def test_expert_parallel_ranks_hold_contiguous_whole_experts_and_half_the_shared_expert() -> None:
    config = ModelConfig.from_dict({**QWEN2_MOE, "num_experts": 8})
    ranks = [shard_for(config, 2, 1, rank).local_config(config).moe for rank in (0, 1)]
    assert [(m.held_experts, m.expert_size, m.shared_size) for m in ranks if m is not None] == [
        (range(0, 4), 32, 24), (range(4, 8), 32, 24)]


def test_a_tp_that_does_not_divide_the_experts_is_refused_naming_the_flag() -> None:
    with pytest.raises(ParallelConfigError, match="--tp: 4 does not divide the model's 6 experts .EP = TP"):
        check_layout(ModelConfig.from_dict({**MIXTRAL, "num_local_experts": 6}), 4, 1)


def test_latent_attention_under_tp_replicates_the_latent_and_splits_the_heads() -> None:
    config = ModelConfig.from_dict(DEEPSEEK_V3)
    shards = [shard_for(config, 2, 1, rank) for rank in (0, 1)]
    assert [(s.heads.start, s.heads.count) for s in shards] == [(0, 2), (2, 2)]
    assert [(s.kv_heads.start, s.kv_heads.count) for s in shards] == [(0, 1), (0, 1)]  # every rank the whole latent


def test_fewer_expert_groups_than_ranks_split_each_expert_over_its_group() -> None:
    """TP 4 x EP 2: ranks 0-1 hold experts 0-3, ranks 2-3 experts 4-7, each rank half of every one's width; the
    shared expert a quarter on each rank. Heads, KV heads and the dense MLP as at EP = TP."""
    config = ModelConfig.from_dict({**QWEN2_MOE, "shared_expert_intermediate_size": 64})
    shards = [shard_for(config, 4, 1, rank, ep=2) for rank in range(4)]
    assert [(s.experts.start, s.experts.count) for s in shards] == [(0, 4), (0, 4), (4, 4), (4, 4)]
    assert [(s.expert_columns.start, s.expert_columns.count) for s in shards] == [(0, 16), (16, 16)] * 2
    assert [(s.shared_columns.start, s.shared_columns.count) for s in shards] == [(0, 16), (16, 16), (32, 16), (48, 16)]
    default = [shard_for(config, 4, 1, rank) for rank in range(4)]
    assert [(s.heads, s.kv_heads, s.columns) for s in shards] == [(s.heads, s.kv_heads, s.columns) for s in default]


@pytest.mark.parametrize(("raw", "tp", "ep", "message"), [
    (MIXTRAL, 4, 3, "--ep: 3 expert groups do not divide the 4 TP ranks"),
    ({**MIXTRAL, "num_local_experts": 6}, 4, 4, "--ep: 4 does not divide the model's 6 experts$"),
    ({**QWEN2_MOE, "moe_intermediate_size": 30}, 4, 1, "--ep: an expert's width 30 does not split over the 4 ranks"),
    ({**QWEN2_MOE, "shared_expert_intermediate_size": 50}, 4, 2, "--tp: 4 does not divide the shared expert's width 50"),
    (MIXTRAL, 2, -1, "--ep: must be >= 1"),
    ({**SIZE, "model_type": "llama"}, 2, 4, "--ep: 4 expert groups do not divide the 2 TP ranks"),
])
def test_an_expert_layout_the_model_cannot_take_names_the_flag(raw: dict, tp: int, ep: int, message: str) -> None:
    with pytest.raises(ParallelConfigError, match=message):
        check_layout(ModelConfig.from_dict(raw), tp, 1, ep=ep)


def test_a_dense_model_takes_the_expert_groups_a_plan_names_and_ignores_them() -> None:
    dense = ModelConfig.from_dict({**SIZE, "model_type": "llama"})
    check_layout(dense, 2, 1, ep=1)
    assert shard_for(dense, 2, 1, 1, ep=1) == shard_for(dense, 2, 1, 1)
