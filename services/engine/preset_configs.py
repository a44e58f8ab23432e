"""Model presets: the Hugging Face config.json contents of the random-weight checkpoints `make-model` writes
(the tiny and small ones for tests and CPU runs, paper-sized shapes for GPU runs)."""

from __future__ import annotations

from services.common.tokenizer import BYTE_OFFSET

PRESET_FILE = "distserve-preset.json"  # written last by make_model: the preset contents a folder was made from
BYTE_VOCAB = BYTE_OFFSET + 256  # tiny/small presets: every id decodes to a special or a byte

_LLAMA_BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "attention_bias": False, "initializer_range": 0.02,
}
_OPT_BASE = {
    "architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu",
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_layer_norm_before": True,
    "enable_bias": True, "layer_norm_elementwise_affine": True, "dropout": 0.0,
    "attention_dropout": 0.0, "activation_dropout": 0.0, "layerdrop": 0.0, "init_std": 0.02,
}


def _llama(hidden: int, inter: int, layers: int, heads: int, kv_heads: int, vocab: int, max_pos: int, **extra) -> dict:
    return {**_LLAMA_BASE, "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
            "max_position_embeddings": max_pos, **extra}


def _opt(hidden: int, ffn: int, layers: int, heads: int, vocab: int, max_pos: int) -> dict:
    return {**_OPT_BASE, "hidden_size": hidden, "word_embed_proj_dim": hidden, "ffn_dim": ffn,
            "num_hidden_layers": layers, "num_attention_heads": heads, "vocab_size": vocab,
            "max_position_embeddings": max_pos}


_FAMILY_BASE = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "vocab_size": BYTE_VOCAB, "torch_dtype": "float32"}
_WINDOW = 16  # tiny sliding-window presets: tests reach 4x the window with prompts of tens of tokens
_GEMMA_TINY = {
    **_FAMILY_BASE, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": _WINDOW, "max_position_embeddings": 2048,
}
# The families of 2026 at test size: written by transformers' own classes (make_model.py)
FAMILY_PRESETS: dict[str, dict] = {
    "tiny-qwen3": {
        **_FAMILY_BASE, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "max_position_embeddings": 2048, "tie_word_embeddings": True,
    },
    "tiny-mistral": {
        **_FAMILY_BASE, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 2048, "sliding_window": _WINDOW,
    },
    "tiny-gemma2": {
        **_GEMMA_TINY, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 2,
        "attn_logit_softcapping": 5.0, "final_logit_softcapping": 10.0,  # low enough to bite on random weights
    },
    "tiny-gemma3": {
        **_GEMMA_TINY, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
    },
    "tiny-phi3": {
        **_FAMILY_BASE, "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        # LongRoPE: sequences past 64 tokens switch to the long factors; 3/4 of each head rotates (as Phi-4-mini)
        "max_position_embeddings": 1024, "original_max_position_embeddings": 64, "partial_rotary_factor": 0.75,
        "rope_scaling": {"type": "longrope", "factor": 16.0, "short_factor": [1.0, 1.1, 1.2, 1.3, 1.5, 1.8],
                         "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]},
    },
}

_MOE_TINY = {**_FAMILY_BASE, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 2048, "num_experts_per_tok": 2}
# Mixture-of-experts models at test size, written by transformers' own classes: 8 experts, 2 per token
MOE_PRESETS: dict[str, dict] = {
    "tiny-mixtral": {**_MOE_TINY, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                     "intermediate_size": 96, "num_local_experts": 8},
    "tiny-qwen2-moe": {  # a dense first layer (mlp_only_layers), a shared expert behind its sigmoid gate
        **_MOE_TINY, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "intermediate_size": 128,
        "num_experts": 8, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 96, "mlp_only_layers": [0],
        "norm_topk_prob": False, "qkv_bias": True},
    "tiny-qwen3-moe": {**_MOE_TINY, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                       "intermediate_size": 128, "head_dim": 32, "num_experts": 8, "moe_intermediate_size": 48,
                       "norm_topk_prob": True},
    "tiny-deepseek-v3": {  # latent attention; a dense first layer, then 8 experts in 4 groups (2 groups kept)
        **_MOE_TINY, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "intermediate_size": 128,
        "n_routed_experts": 8, "moe_intermediate_size": 48, "n_shared_experts": 1, "first_k_dense_replace": 1,
        "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True, "kv_lora_rank": 32,
        "q_lora_rank": 48, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 24, "head_dim": 8,
        "num_key_value_heads": 4, "rope_interleave": True},
}

_QWEN3_SMALL = {**_FAMILY_BASE, "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 64, "max_position_embeddings": 4096}
# CPU benchmarks: a Qwen3-MoE of 32 experts (4 per token) and the dense Qwen3 of the same active parameters
MOE_BENCH_PRESETS: dict[str, dict] = {
    "small-qwen3-moe": {**_QWEN3_SMALL, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                        "intermediate_size": 1024, "num_experts": 32, "num_experts_per_tok": 4,
                        "moe_intermediate_size": 256, "norm_topk_prob": True},
    "small-qwen3-dense": {**_QWEN3_SMALL, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                          "intermediate_size": 1024},  # 4 experts × 256: the MoE's active MLP width
    # Mixtral 8x7B's shape scaled down (8 experts, 2 per token, expert width 3.5 × hidden, 4 query heads per KV
    # head): expert layouts under TP (`--layouts 2x1ep1,2x1ep2`)
    "small-mixtral": {**_FAMILY_BASE, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                      "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
                      "max_position_embeddings": 4096, "intermediate_size": 1792, "num_local_experts": 8,
                      "num_experts_per_tok": 2},
}

PRESETS: dict[str, dict] = {
    "tiny-llama": _llama(64, 128, 2, 4, 2, BYTE_VOCAB, 2048, torch_dtype="float32"),
    "small-llama": _llama(512, 1408, 13, 8, 4, BYTE_VOCAB, 4096, torch_dtype="float32"),
    "medium-llama": _llama(1024, 2816, 24, 16, 8, BYTE_VOCAB, 4096, torch_dtype="float32"),  # 1.1 GB: CPU scaling
    "small-mistral": {**_llama(512, 1408, 13, 8, 4, BYTE_VOCAB, 4096, torch_dtype="float32"),  # small-llama, windowed
                      "architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 256},
    "tiny-opt": {**_opt(64, 256, 2, 4, BYTE_VOCAB, 2048), "torch_dtype": "float32"},
    "opt-13b": {**_opt(5120, 20480, 40, 40, 50272, 2048), "torch_dtype": "float16"},
    "opt-66b": {**_opt(9216, 36864, 64, 72, 50272, 2048), "torch_dtype": "float16"},
    "opt-175b": {**_opt(12288, 49152, 96, 96, 50272, 2048), "torch_dtype": "float16"},
    "llama-3-8b": _llama(
        4096, 14336, 32, 32, 8, 128256, 131072, torch_dtype="bfloat16", rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    ),
    **FAMILY_PRESETS,
    **MOE_PRESETS,
    **MOE_BENCH_PRESETS,
}

DEFAULT_PRESET = "small-llama"
