"""Packed projections (QKV, gate-up) load from and write to Hugging Face's separate tensors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from services.common.model_config import ModelConfig
from services.engine.models import build_model, materialize
from services.engine.models.packed import checkpoint_shapes
from services.engine.parallel.layers import shard_transform
from services.engine.parallel.shard import shard_for
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
    shutil.copy(Path(tiny_llama_dir) / "config.json", tmp_path)
    model = materialize(ModelConfig.from_folder(tiny_llama_dir), torch.device("cpu"), torch.float32)
    with pytest.raises(KeyError, match="v_proj"):
        load_weights(model, tmp_path)


def _fused(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint as Phi-3 stores it: q/k/v stacked as qkv_proj, gate/up as gate_up_proj."""
    out = dict(tensors)
    for fused, parts in (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                         ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"))):
        for prefix in {k.split(parts[0])[0] for k in tensors if parts[0] in k}:
            out[f"{prefix}{fused}.weight"] = torch.cat([out.pop(f"{prefix}{part}.weight") for part in parts])
    return out


@pytest.mark.parametrize("tp_rank", [None, 0, 1])
def test_fused_checkpoint_loads_as_its_parts(tiny_llama_dir: str, tmp_path: Path, tp_rank: int | None) -> None:
    """A fused checkpoint gives every parameter (whole, or a TP 2 rank's slice) the values the separate one gives."""
    save_file(_fused(_tensors(tiny_llama_dir)), str(tmp_path / "model.safetensors"))
    shutil.copy(Path(tiny_llama_dir) / "config.json", tmp_path)
    config = ModelConfig.from_folder(tiny_llama_dir)
    shard = None if tp_rank is None else shard_for(config, 2, 1, tp_rank)
    models = []
    for folder in (tiny_llama_dir, tmp_path):
        model = materialize(config if shard is None else shard.local_config(config), torch.device("cpu"), torch.float32)
        load_weights(model, folder, None if shard is None else shard_transform(shard, config.head_dim))
        models.append(dict(model.named_parameters()))
    assert models[0].keys() == models[1].keys()
    for name, param in models[0].items():
        assert torch.equal(param, models[1][name]), name
