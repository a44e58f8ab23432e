"""The shipped A100 coefficient sets and the model shapes behave as the DistServe authors' data says."""

import json
from pathlib import Path

import pytest

from services.engine.preset_configs import BYTE_VOCAB, FAMILY_PRESETS
from services.planner.hardware import DATA, load_latency_model
from services.planner.shapes import PRESETS, load_shape, shape_from_config


def test_opt13b_prefill_matches_the_authors_fit():
    model = load_latency_model("a100-80gb", load_shape("opt-13b"))
    # the authors' entry for TP 1: 18.10 ms + 0.1019 ms/token + 7.12e-6 ms/token² (../shared/data)
    expected_ms = 18.10254647486372 + 0.1019122572698738 * 512 + 7.122264314252114e-06 * 512**2
    assert model.at(1).prefill_time(512, 512**2) == pytest.approx(expected_ms / 1000)


def test_decode_switches_coefficients_at_the_large_batch_threshold():
    c = load_latency_model("a100-80gb", load_shape("opt-13b")).at(1)
    small, large = c.decode_time(94 * 600, 94), c.decode_time(95 * 600, 95)
    assert small == pytest.approx((19.934702624895458 + 0.0006269356524350583 * 94 * 600 + 0.03850697740828398 * 94) / 1e3)
    assert large == pytest.approx((7.1661889468253595 + 0.0005798000403396046 * 95 * 600 + 0.15831096191764046 * 95) / 1e3)


def test_unprofiled_tensor_parallel_degree_is_rescaled_from_the_nearest():
    model = load_latency_model("a100-80gb", load_shape("opt-13b"))
    four, eight = model.at(4), model.at(8)
    assert eight.prefill.per_token == pytest.approx(four.prefill.per_token / 2)
    assert eight.prefill.c0 == four.prefill.c0
    assert eight.prefill_time(2048, 2048**2) < four.prefill_time(2048, 2048**2)


def test_kv_capacity_comes_from_the_authors_table_and_a_model_that_does_not_fit_has_none():
    model = load_latency_model("a100-80gb", load_shape("opt-66b"))
    assert model.kv_capacity(4, 1) == 78496
    assert model.kv_capacity(1, 1) == 0


def test_opt175b_set_is_shipped_and_slower_than_66b():
    big = load_latency_model("a100-80gb", load_shape("opt-175b")).at(8)
    mid = load_latency_model("a100-80gb", load_shape("opt-66b")).at(8)
    assert big.prefill_time(1024, 1024**2) > mid.prefill_time(1024, 1024**2)
    assert big.decode_time(32 * 1024, 32) > mid.decode_time(32 * 1024, 32)


def test_unknown_hardware_or_model_names_the_argument():
    with pytest.raises(ValueError, match="hardware"):
        load_latency_model("h100-nope", load_shape("opt-13b"))
    with pytest.raises(ValueError, match="hardware"):
        load_latency_model("a100-80gb", load_shape("llama-3-8b"))
    with pytest.raises(ValueError, match="model"):
        load_shape("no-such-model")


def test_presets_and_hugging_face_config_folders(tmp_path):
    assert {"opt-13b", "opt-66b", "opt-175b", "llama-3-8b", "tiny-llama", "small-llama", "tiny-opt"} <= set(PRESETS)
    assert (PRESETS["opt-66b"].hidden, PRESETS["opt-66b"].layers, PRESETS["opt-66b"].heads) == (9216, 64, 72)
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 8192, "vocab_size": 128256}))
    shape = load_shape(str(llama))
    assert (shape.name, shape.kv_heads, shape.ffn, shape.max_context) == ("llama", 8, 14336, 8192)
    assert shape.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    opt = tmp_path / "opt"
    opt.mkdir()
    (opt / "config.json").write_text(json.dumps({
        "hidden_size": 5120, "ffn_dim": 20480, "num_hidden_layers": 40, "num_attention_heads": 40,
        "max_position_embeddings": 2048, "vocab_size": 50272}))
    assert load_shape(str(opt)) == PRESETS["opt-13b"].__class__(**{**PRESETS["opt-13b"].as_dict(), "name": "opt"})


def test_family_presets_count_their_own_head_width():
    """Qwen3 and Gemma set a head width apart from hidden / heads: KV bytes and parameters follow it, and a folder
    that spells out the usual width (transformers 5 writes head_dim for Mistral) reads as its preset does."""
    qwen3, gemma2, mistral = PRESETS["tiny-qwen3"], PRESETS["tiny-gemma2"], PRESETS["tiny-mistral"]
    assert (qwen3.head_dim, gemma2.head_dim, mistral.head_dim) == (32, 16, 16)
    assert qwen3.kv_bytes_per_token(4) == 2 * 2 * 2 * 32 * 4  # layers x K,V x KV heads x head width x fp32
    assert qwen3.params == 2 * (2 * 64 * (4 + 2) * 32 + 3 * 64 * 128) + BYTE_VOCAB * 64
    assert shape_from_config({**FAMILY_PRESETS["tiny-mistral"], "head_dim": 16}, "tiny-mistral") == mistral


def test_a_multimodal_gemma3_folder_is_planned_as_its_language_model(tmp_path):
    """Gemma 3 4B's config.json as published: a sparse text_config, the rest transformers' defaults."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": {
            "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}))
    shape = load_shape(str(tmp_path))
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab) == (34, 8, 4, 256, 262208)
    assert shape.kv_bytes_per_token() == 2 * 34 * 4 * 256 * 2


SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"  # CI keeps shared/ beside the clone


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (the project's reference data) is not beside the repo")
def test_shipped_sets_are_the_authors_data_as_kept_in_shared():
    shipped = json.loads((DATA / "a100-80gb.json").read_text())
    authors = json.loads((SHARED / "distserve-profile-a100-80g.json").read_text())
    assert {k: shipped[k] for k in authors} == authors
    assert (DATA / "a100-80gb-kv-tokens.csv").read_text() == (SHARED / "distserve-max-num-tokens-a100-80g.csv").read_text()
