"""Packed projections (QKV, gate-up) load from and write to Hugging Face's separate tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from services.common.model_config import ModelConfig
from services.engine.models import build_model, materialize
from services.engine.models.packed import checkpoint_shapes
from services.engine.weights import checkpoint_files, load_weights


def _tensors(folder: str) -> dict[str, torch.Tensor]:
    return {k: v for path in checkpoint_files(Path(folder)) for k, v in load_file(str(path)).items()}


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_opt_dir"])
def test_checkpoint_names_are_hugging_faces(fixture: str, request: pytest.FixtureRequest) -> None:
    folder = request.getfixturevalue(fixture)
    tensors = _tensors(folder)
    with torch.device("meta"):
        shapes = dict(checkpoint_shapes(build_model(ModelConfig.from_folder(folder))))
    assert {k for k in shapes if not k.endswith("lm_head.weight")} <= set(tensors)
    assert all(tensors[k].shape == shape for k, shape in shapes.items() if k in tensors)
    assert any(".q_proj." in k for k in shapes) and not any("qkv_proj" in k for k in shapes)


def test_parts_land_in_their_rows(tiny_llama_dir: str) -> None:
    config = ModelConfig.from_folder(tiny_llama_dir)
    model = materialize(config, torch.device("cpu"), torch.float32)
    load_weights(model, tiny_llama_dir)
    tensors = _tensors(tiny_llama_dir)
    attn, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    q, k = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    assert torch.equal(attn.qkv_proj.weight[q : q + k], tensors["model.layers.1.self_attn.k_proj.weight"])
    assert torch.equal(mlp.gate_up_proj.weight[config.intermediate_size :], tensors["model.layers.1.mlp.up_proj.weight"])


def test_a_missing_part_is_named(tiny_llama_dir: str, tmp_path: Path) -> None:
    tensors = _tensors(tiny_llama_dir)
    del tensors["model.layers.0.self_attn.v_proj.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    model = materialize(ModelConfig.from_folder(tiny_llama_dir), torch.device("cpu"), torch.float32)
    with pytest.raises(KeyError, match="v_proj"):
        load_weights(model, tmp_path)
