"""Loads Hugging Face-format weights (*.safetensors, single or sharded by an index) into a model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from services.engine.models.packed import checkpoint_shapes, checkpoint_slices


def checkpoint_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    return files


def _canonical(name: str) -> str:
    # Original OPT checkpoints name parameters "decoder.*" without the "model." prefix.
    return f"model.{name}" if name.startswith("decoder.") else name


# (canonical name, the checkpoint's lazy slice: index it to read a part) → (this model's name, tensor), or None
Transform = Callable[[str, Any], "tuple[str, torch.Tensor] | None"]


def load_weights(model: nn.Module, folder: str | Path, transform: Transform | None = None) -> None:
    """Copies every tensor of the checkpoint into the model's parameter of the same name, or into its rows of a
    packed parameter (`PackedLinear`); every parameter row must be covered.

    `transform` maps a checkpoint tensor to the (name, part) this model holds, or None to skip it (a rank's shard)."""
    params = dict(model.named_parameters())
    slices = checkpoint_slices(model)
    missing = {name for name, _ in checkpoint_shapes(model)}
    for path in checkpoint_files(Path(folder)):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                name = _canonical(key)
                tensor = None
                if transform is not None:
                    kept = transform(name, f.get_slice(key))
                    if kept is None:
                        continue
                    name, tensor = kept
                if name in slices:
                    packed, start, rows = slices[name]
                    target = params[packed][start : start + rows]
                elif name in params:
                    target = params[name]
                elif name == "lm_head.weight":  # tied head saved anyway
                    continue
                else:
                    raise KeyError(f"checkpoint tensor {key!r} has no place in the model")
                if tensor is None:
                    tensor = f.get_tensor(key)
                if tensor.shape != target.shape:
                    raise ValueError(f"{key}: checkpoint shape {tuple(tensor.shape)} != model {tuple(target.shape)}")
                with torch.no_grad():
                    target.copy_(tensor.to(target.dtype))
                missing.discard(name)
    if missing:
        raise KeyError(f"checkpoint lacks {sorted(missing)[:5]}")
