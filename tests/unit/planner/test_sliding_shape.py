"""A sliding-window model's KV in the planner (docs/engine.md, "KV by layer group"): a sliding layer keeps its
window and one block, so memory, transfers and decode capacity count fewer K/V tokens than the sequence's."""

from __future__ import annotations

import numpy as np
import pytest

from services.common import defaults
from services.common.step_model.latency import DecodeCoeffs, PrefillCoeffs, TPCoefficients
from services.planner.shapes import PRESETS, shape_from_config
from services.planner.simulator import simulate_decode

GEMMA3_27B = {  # the published text config's keys the engine reads (62 layers, five in six sliding, window 1024)
    "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
    "sliding_window": 1024, "max_position_embeddings": 131072, "query_pre_attn_scalar": 168,
}


def test_sliding_layers_keep_their_window_and_full_layers_every_token() -> None:
    shape = shape_from_config(GEMMA3_27B, "gemma-3-27b")
    assert (shape.sliding_layers, shape.window) == (52, 1024)
    assert shape.kv_tokens(1000) == 1000  # within the window every layer keeps every token
    kept = shape.kv_tokens(32768)
    assert kept == -(-(10 * 32768 + 52 * (1024 + defaults.BLOCK_SIZE)) // 62)
    assert 5 < 32768 / kept < 5.5  # a 32k-token sequence keeps some 5x less K/V than with every layer full
    assert PRESETS["tiny-llama"].kv_tokens(5000) == 5000


def test_a_sliding_model_decodes_more_requests_in_the_same_memory() -> None:
    coeffs = TPCoefficients(PrefillCoeffs(0, 0, 0), DecodeCoeffs(0.01, 0.0, 0.0), DecodeCoeffs(0.01, 0.0, 0.0))
    shape = shape_from_config(GEMMA3_27B, "gemma-3-27b")
    prompts, outputs, arrivals = np.full(4, 8000), np.full(4, 11), np.zeros(4)
    capacity = 2 * (8000 + 11)  # two requests at a time if every layer kept every token
    full = simulate_decode(coeffs, 1, capacity, prompts, outputs, arrivals)
    sliding = simulate_decode(coeffs, 1, capacity, prompts, outputs, arrivals, shape=shape)
    assert sorted(full) == pytest.approx([0.01, 0.01, 0.02, 0.02])
    assert sliding == pytest.approx([0.01] * 4)  # all four fit at once
