"""What DeepSeek-V3's published folders carry beyond the model: the multi-token-prediction layer after the last
(`num_nextn_predict_layers`; not loaded, as transformers skips it) and, for its fp8 release, a
`quantization_config` (refused, naming it: read as plain tensors its weights would be wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model
from tests.family_reference import LONG


def _logits(folder: Path) -> torch.Tensor:
    engine = LLMEngine(EngineConfig(str(folder), num_blocks=64, block_size=4))
    try:
        return engine.runner.full_logits(LONG, list(range(engine.blocks.blocks_for(len(LONG)))))
    finally:
        engine.close()


def _config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_the_next_token_prediction_layer_is_not_loaded_and_changes_nothing(tmp_path) -> None:
    folder = make_model("tiny-deepseek-v3", tmp_path)
    before = _logits(folder)
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    save_file({f"model.layers.{layers}.eh_proj.weight": torch.randn(8, 16),
               f"model.layers.{layers}.self_attn.kv_a_proj_with_mqa.weight": torch.randn(8, 8)},
              str(folder / "model-mtp.safetensors"))
    _config(folder, num_nextn_predict_layers=0)
    with pytest.raises(KeyError, match="no place in the model"):  # strict while the config names no such layer
        _logits(folder)
    _config(folder, num_nextn_predict_layers=1)
    assert torch.equal(_logits(folder), before)


def test_a_quantized_checkpoint_is_refused_naming_its_config(tmp_path) -> None:
    folder = make_model("tiny-deepseek-v3", tmp_path)
    _config(folder, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    with pytest.raises(ValueError, match=r"quantization_config \(fp8\)"):
        LLMEngine(EngineConfig(str(folder), num_blocks=64, block_size=4))
