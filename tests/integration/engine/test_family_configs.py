"""config.json as published (the older keys: rope_theta, rope_scaling, rope_local_base_freq, sliding_window_pattern,
use_sliding_window) reads as the same architecture as transformers 5's own rewrite of it, and an unsupported
model_type is refused naming itself and the supported ones."""

from __future__ import annotations

import pytest

from services.common.model_config import SUPPORTED_TYPES, ModelConfig

transformers = pytest.importorskip("transformers")

SIZE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 300, "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "rms_norm_eps": 1e-6, "head_dim": 16}
PUBLISHED = {  # model_type → (transformers' config class, the keys a checkpoint of an older release carries)
    "gemma3_text": ("Gemma3TextConfig", {
        "num_hidden_layers": 7, "rope_theta": 1e6, "rope_local_base_freq": 1e4, "sliding_window": 16,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 3}),
    "gemma2": ("Gemma2Config", {"num_hidden_layers": 3, "sliding_window": 16}),
    "qwen3": ("Qwen3Config", {"num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": 16,
                              "max_window_layers": 1}),
    "qwen2": ("Qwen2Config", {"num_hidden_layers": 2, "use_sliding_window": False, "sliding_window": 16}),
    "mistral": ("MistralConfig", {"num_hidden_layers": 2, "sliding_window": 16, "rope_theta": 1e6}),
    "phi3": ("Phi3Config", {"num_hidden_layers": 2, "original_max_position_embeddings": 64, "partial_rotary_factor": 0.5,
                            "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4},
                            "sliding_window": 32}),
}


@pytest.mark.parametrize("model_type", list(PUBLISHED))
def test_published_keys_read_as_transformers_reads_them(model_type: str) -> None:
    cls, keys = PUBLISHED[model_type]
    published = {"model_type": model_type, **SIZE, **keys}
    rewritten = getattr(transformers, cls)(**SIZE, **keys).to_dict()
    assert ModelConfig.from_dict(published) == ModelConfig.from_dict(rewritten)


def test_layer_types_and_rope_as_published() -> None:
    gemma3 = ModelConfig.from_dict({"model_type": "gemma3_text", **SIZE, **PUBLISHED["gemma3_text"][1]})
    assert [gemma3.window(i) for i in range(7)] == [16, 16, None, 16, 16, None, 16]
    assert gemma3.rope["sliding_attention"]["rope_theta"] == 1e4 and gemma3.rope["full_attention"]["factor"] == 8.0
    qwen3 = ModelConfig.from_dict({"model_type": "qwen3", **SIZE, **PUBLISHED["qwen3"][1]})
    assert [qwen3.window(i) for i in range(3)] == [None, 16, 16]
    assert ModelConfig.from_dict({"model_type": "qwen2", **SIZE, **PUBLISHED["qwen2"][1]}).sliding_window is None


def test_unsupported_model_type_names_itself_and_the_supported_ones() -> None:
    with pytest.raises(ValueError) as err:
        ModelConfig.from_dict({"model_type": "deepseek_v3", **SIZE, "num_hidden_layers": 2})
    assert "'deepseek_v3'" in str(err.value) and all(t in str(err.value) for t in SUPPORTED_TYPES)


def test_gemma3_multimodal_config_reads_as_its_language_model() -> None:
    """A Gemma 3 checkpoint as published for 4B and up (model_type gemma3) lists a few text_config keys and relies
    on Gemma3TextConfig's defaults for the rest: read as transformers fills them in."""
    published = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "eos_token_id": [1, 106],
                 "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                                 "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                 "sliding_window": 1024},
                 "vision_config": {"model_type": "siglip_vision_model"}}
    text = transformers.Gemma3Config(**{k: v for k, v in published.items() if k != "model_type"}).text_config
    ours = ModelConfig.from_dict(published)
    assert ours == ModelConfig.from_dict({**text.to_dict(), "eos_token_id": [1, 106]})
    assert (ours.num_heads, ours.head_dim, ours.vocab_size, ours.sliding_window) == (8, 256, 262208, 1024)
    assert ours.rope["full_attention"]["rope_theta"] == 1e6 and ours.rope["sliding_attention"]["rope_theta"] == 1e4
