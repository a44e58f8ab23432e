"""Writes a seeded random-weight checkpoint in the Hugging Face format (config, safetensors, tokenizer).

Tensors are made one at a time and written in shards, so paper-sized presets never sit in memory twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from services.common.model_config import ModelConfig
from services.common.tokenizer import BYTE_OFFSET, SPECIALS
from services.engine.models import build_model
from services.engine.models.packed import checkpoint_shapes
from services.engine.preset_configs import PRESET_FILE, PRESETS

SHARD_BYTES = 2 << 30
OWN_WRITER = ("llama", "opt")  # model types written tensor by tensor (paper-sized presets never sit in memory)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def write_tokenizer(out: Path, vocab_size: int) -> None:
    """A byte-level BPE tokenizer.json with no merges: ids 0-2 specials, then the 256 bytes, then padding tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({ch: BYTE_OFFSET + b for b, ch in _bytes_to_unicode().items()})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([*SPECIALS, *(f"<|pad{i}|>" for i in range(vocab_size - len(vocab)))])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "model_max_length": 1 << 30,
    }, indent=1))


def _init(name: str, shape: torch.Size, gen: torch.Generator, tied: bool) -> torch.Tensor:
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    if name.endswith(".bias"):
        return 0.02 * torch.randn(shape, generator=gen)
    if "embed" in name:
        # A tied head scores tokens against the embedding: unit rows would make the input token win every step.
        scale = shape[-1] ** -0.5 if tied and "embed_tokens" in name else 1.0
        return scale * torch.randn(shape, generator=gen)
    # Linear [out, in]: unit-variance outputs keep random logits peaked enough for stable greedy tokens.
    return torch.randn(shape, generator=gen) / shape[-1] ** 0.5


def make_model(preset: str, out: str | Path, seed: int = 0, overrides: dict | None = None) -> Path:
    """Writes the preset's checkpoint (Llama and OPT shapes by our own streaming writer, the other families by
    transformers' own classes), its tokenizer, and PRESET_FILE: the preset contents it was made from."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    raw = {**PRESETS[preset], **(overrides or {})}
    if raw["model_type"] in OWN_WRITER:
        _write_weights(raw, out, seed)
        (out / "config.json").write_text(json.dumps(raw, indent=1))
    else:
        _write_with_transformers(raw, out, seed)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    write_tokenizer(out, raw["vocab_size"])
    (out / PRESET_FILE).write_text(json.dumps(raw, indent=1))
    return out


def _write_with_transformers(raw: dict, out: Path, seed: int) -> None:
    """The family's transformers class from the preset's config, its parameters drawn as `_init` draws ours."""
    try:
        import transformers
    except ModuleNotFoundError as err:  # a dev extra: the wheel alone serves, and writes the Llama and OPT presets
        raise ModuleNotFoundError(f"make-model: {raw['model_type']} presets are written by transformers' own "
                                  "classes; pip install transformers") from err

    config = transformers.AutoConfig.for_model(**raw)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for i, (name, param) in enumerate(model.named_parameters()):
            gen = torch.Generator().manual_seed(seed * 100_003 + i)
            param.copy_(_init(name, param.shape, gen, config.tie_word_embeddings))
    model.to(getattr(torch, raw.get("torch_dtype", "float32"))).save_pretrained(out)
    ModelConfig.from_folder(out)  # a preset the engine cannot read fails here, not when served


def _write_weights(raw: dict, out: Path, seed: int) -> None:
    config = ModelConfig.from_dict(raw)
    dtype = getattr(torch, raw.get("torch_dtype", "float32"))
    with torch.device("meta"):
        shapes = list(checkpoint_shapes(build_model(config)))
    shard: dict[str, torch.Tensor] = {}
    weight_map: dict[str, str] = {}
    size = 0
    names: list[list[str]] = []

    def flush() -> None:
        nonlocal shard, size
        if shard:
            index = len(names)
            save_file(shard, str(out / f"model-{index:05d}.safetensors"), metadata={"format": "pt"})
            names.append(list(shard))
            shard, size = {}, 0

    for i, (name, shape) in enumerate(shapes):
        gen = torch.Generator().manual_seed(seed * 100_003 + i)
        tensor = _init(name, shape, gen, config.tie_embeddings).to(dtype)
        if size + tensor.nbytes > SHARD_BYTES:
            flush()
        shard[name] = tensor
        size += tensor.nbytes
    flush()
    total = len(names)
    for index, shard_names in enumerate(names):
        final = f"model-{index + 1:05d}-of-{total:05d}.safetensors"
        (out / f"model-{index:05d}.safetensors").rename(out / final)
        weight_map.update({name: final for name in shard_names})
    if total == 1:
        (out / weight_map[shapes[0][0]]).rename(out / "model.safetensors")
    else:
        (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
