"""Model presets: the Hugging Face config.json contents of the random-weight checkpoints `make-model` writes
(the tiny and small ones for tests and CPU runs, paper-sized shapes for GPU runs)."""

from __future__ import annotations

from services.common.tokenizer import BYTE_OFFSET

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


PRESETS: dict[str, dict] = {
    "tiny-llama": _llama(64, 128, 2, 4, 2, BYTE_VOCAB, 2048, torch_dtype="float32"),
    "small-llama": _llama(512, 1408, 13, 8, 4, BYTE_VOCAB, 4096, torch_dtype="float32"),
    "medium-llama": _llama(1024, 2816, 24, 16, 8, BYTE_VOCAB, 4096, torch_dtype="float32"),  # 1.1 GB: CPU scaling
    "tiny-opt": {**_opt(64, 256, 2, 4, BYTE_VOCAB, 2048), "torch_dtype": "float32"},
    "opt-13b": {**_opt(5120, 20480, 40, 40, 50272, 2048), "torch_dtype": "float16"},
    "opt-66b": {**_opt(9216, 36864, 64, 72, 50272, 2048), "torch_dtype": "float16"},
    "opt-175b": {**_opt(12288, 49152, 96, 96, 50272, 2048), "torch_dtype": "float16"},
    "llama-3-8b": _llama(
        4096, 14336, 32, 32, 8, 128256, 131072, torch_dtype="bfloat16", rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    ),
}

DEFAULT_PRESET = "small-llama"
