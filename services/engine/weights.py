"""Loads Hugging Face-format weights (*.safetensors, single or sharded by an index) into a model.

Fused checkpoint tensors (Phi-3's qkv_proj and gate_up_proj) are read as their parts (q/k/v, gate/up), so packing
and tensor-parallel slicing see the same names whichever way a checkpoint stores them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from services.common.model_config import ModelConfig
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


# A multimodal checkpoint's language model, named as a text-only one (Gemma 3: as published, and as transformers 5
# names it in memory); its vision tower and projector are not served.
LANGUAGE_MODEL = {"language_model.model.": "model.", "language_model.lm_head.": "lm_head.", "model.language_model.": "model."}
NOT_SERVED = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def _canonical(name: str) -> str | None:
    """The checkpoint tensor's name in a text-only model, or None for a part that is not served."""
    if name.startswith(NOT_SERVED):
        return None
    for prefix, text_only in LANGUAGE_MODEL.items():
        if name.startswith(prefix):
            return text_only + name[len(prefix):]
    # Original OPT checkpoints name parameters "decoder.*" without the "model." prefix.
    return f"model.{name}" if name.startswith("decoder.") else name


@dataclass(frozen=True, slots=True)
class RowSlice:
    """Rows [start, start + rows) of a checkpoint tensor's lazy slice, indexed as the slice is ([a:b], [:, a:b])."""

    whole: Any
    start: int
    rows: int

    def __getitem__(self, key: Any) -> torch.Tensor:
        key = key if isinstance(key, tuple) else (key,)
        first = range(self.rows)[key[0]]
        return self.whole[(slice(self.start + first.start, self.start + first.stop), *key[1:])]


def fused_parts(config: ModelConfig) -> dict[str, list[tuple[str, int]]]:
    """Fused projection → its parts and their rows, in the order a fused checkpoint stacks them."""
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    return {"qkv_proj": [("q_proj", q), ("k_proj", kv), ("v_proj", kv)],
            "gate_up_proj": [("gate_proj", config.intermediate_size), ("up_proj", config.intermediate_size)]}


def _parts(name: str, whole: Any, fused: dict[str, list[tuple[str, int]]]) -> Iterator[tuple[str, Any]]:
    """(name, lazy slice) of a checkpoint tensor, or of each of its parts where it is a fused projection."""
    owner, _, leaf = name.rpartition(".")
    parent, _, module = owner.rpartition(".")
    if module not in fused:
        yield name, whole
        return
    start = 0
    for part, rows in fused[module]:
        yield f"{parent}.{part}.{leaf}", RowSlice(whole, start, rows)
        start += rows


def _served(f: Any, fused: dict[str, list[tuple[str, int]]]) -> Iterator[tuple[str, str, Any]]:
    """(checkpoint key, canonical name, lazy slice) of each tensor, or tensor part, of an open safetensors file that
    a text-only model holds."""
    for key in f.keys():
        name = _canonical(key)
        if name is not None:
            for part_name, part in _parts(name, f.get_slice(key), fused):
                yield key, part_name, part


# (canonical name, the checkpoint's lazy slice: index it to read a part) → (this model's name, tensor), or None
Transform = Callable[[str, Any], "tuple[str, torch.Tensor] | None"]


def _next_token_layers(config: ModelConfig) -> tuple[str, ...]:
    """Name prefixes of DeepSeek-V3's multi-token-prediction layers (`num_nextn_predict_layers`, after the model's
    last layer): a speculative head the model's forward pass does not use, so not loaded (as transformers skips it)."""
    last = config.num_layers
    return tuple(f"model.layers.{i}." for i in range(last, last + config.next_token_layers))


def load_weights(model: nn.Module, folder: str | Path, transform: Transform | None = None) -> None:
    """Copies every tensor of the checkpoint into the model's parameter of the same name, or into its rows of a
    packed parameter (`PackedLinear`); every parameter row must be covered.

    `transform` maps a checkpoint tensor to the (name, part) this model holds, or None to skip it (a rank's shard)."""
    params = dict(model.named_parameters())
    slices = checkpoint_slices(model)
    missing = {name for name, _ in checkpoint_shapes(model)}
    config = ModelConfig.from_folder(folder)
    fused = fused_parts(config)
    unserved = _next_token_layers(config)
    for path in checkpoint_files(Path(folder)):
        with safe_open(str(path), framework="pt") as f:
            for key, name, part in _served(f, fused):
                if name.startswith(unserved):
                    continue
                tensor = None
                if transform is not None:
                    kept = transform(name, part)
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
                    tensor = part[:]
                if tensor.shape != target.shape:
                    raise ValueError(f"{key}: checkpoint shape {tuple(tensor.shape)} != model {tuple(target.shape)}")
                with torch.no_grad():
                    target.copy_(tensor.to(target.dtype))
                missing.discard(name)
    if missing:
        raise KeyError(f"checkpoint lacks {sorted(missing)[:5]}")
