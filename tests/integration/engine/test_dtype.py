"""A bf16 checkpoint sharded with an index, as transformers writes it, serves in its own dtype (`--dtype auto`)
or another one named, with logits and greedy tokens equal to transformers' in that dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from tests.hf_checkpoints import save_hf_checkpoint

transformers = pytest.importorskip("transformers")
PROMPT = [1, *range(60, 100)]
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-4}  # max |logit difference|


@pytest.fixture(scope="module")
def bf16_sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = save_hf_checkpoint(tmp_path_factory.mktemp("bf16"), dtype=torch.bfloat16, max_shard_size="100KB")
    assert (out / "model.safetensors.index.json").exists() and len(list(out.glob("model-*.safetensors"))) > 1
    return out


@pytest.mark.parametrize("dtype", ["auto", "float16", "float32"])
def test_a_bf16_sharded_checkpoint_serves_as_transformers_in_the_dtype(bf16_sharded: Path, dtype: str) -> None:
    served = "bfloat16" if dtype == "auto" else dtype
    hf = transformers.AutoModelForCausalLM.from_pretrained(bf16_sharded, dtype=getattr(torch, served)).eval()
    with torch.no_grad():
        want_logits = hf(torch.tensor([PROMPT])).logits[0].float()
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=16, do_sample=False)[0, len(PROMPT):].tolist()
    engine = LLMEngine(EngineConfig(str(bf16_sharded), num_blocks=32, dtype=dtype))
    try:
        assert engine.layout.dtype == served
        logits = engine.runner.full_logits(PROMPT, list(range(engine.blocks.blocks_for(len(PROMPT))))).float()
        (tokens,) = engine.generate([PROMPT], SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True))
    finally:
        engine.close()
    assert (logits - want_logits).abs().max().item() <= TOLERANCE[served]
    assert tokens == want
