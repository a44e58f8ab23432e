"""`distserve make-model` checkpoints load in transformers and in our engine, single-file and sharded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import services.engine.make_model as make_model_module
from services.common.model_config import ModelConfig
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.models import build_model
from services.engine.presets import PRESETS

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)
PROMPT = [1, *range(60, 90)]


def _our_logits(folder: Path) -> torch.Tensor:
    engine = LLMEngine(EngineConfig(str(folder), num_blocks=16))
    try:
        return engine.runner.full_logits(PROMPT, list(range(engine.blocks.blocks_for(len(PROMPT)))))
    finally:
        engine.close()


def _their_logits(folder: Path) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-opt"])
def test_cli_checkpoint_loads_in_transformers(tmp_path: Path, preset: str) -> None:
    out = tmp_path / preset
    done = subprocess.run([sys.executable, "-m", "services", "make-model", "--preset", preset, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    assert (out / "model.safetensors").exists() and not (out / "model.safetensors.index.json").exists()
    assert (_our_logits(out) - _their_logits(out)).abs().max().item() <= 1e-4


def test_shards_written_one_at_a_time_load_everywhere(tmp_path: Path, monkeypatch, tiny_llama_dir: str) -> None:
    limit = 40_000  # tiny-llama's tensors are 256 B to 66 kB: several shards, one oversized tensor alone
    monkeypatch.setattr(make_model_module, "SHARD_BYTES", limit)
    out = make_model_module.make_model("tiny-llama", tmp_path / "sharded")
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) > 2 and sorted(p.name for p in out.glob("*.safetensors")) == shards
    for shard in shards:
        tensors = [name for name, file in weight_map.items() if file == shard]
        assert len(tensors) == 1 or (out / shard).stat().st_size <= limit + 4096  # payload + JSON header
    sharded = _our_logits(out)
    torch.testing.assert_close(sharded, _our_logits(Path(tiny_llama_dir)), atol=0, rtol=0)  # same seed, same weights
    assert (sharded - _their_logits(out)).abs().max().item() <= 1e-4


@pytest.mark.parametrize(("preset", "billions"), [("opt-13b", 12.9), ("opt-66b", 65.7), ("llama-3-8b", 8.03)])
def test_paper_presets_have_paper_sizes(preset: str, billions: float) -> None:
    with torch.device("meta"):
        model = build_model(ModelConfig.from_dict(PRESETS[preset]))
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(billions, rel=0.01)
