"""YaRN rotary scaling as published configs carry it (DeepSeek-V3 with `mscale` / `mscale_all_dim`, whose latent
attention scales its scores by the latter too; Qwen3's plain factor): greedy tokens and logprobs equal transformers'
(fp32, 1e-4) for prompts past the original context, through the paged engine, colocated and disaggregated."""

from __future__ import annotations

import pytest
import torch
import transformers

from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model
from tests.family_reference import LONG, PARAMS, PROMPTS, reference

YARN = {  # an original context of 16 tokens: the long prompt (67) reaches 4x past it
    "tiny-deepseek-v3": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1.0,
                         "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0},
    "tiny-qwen3": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 10000.0},
}


@pytest.mark.parametrize("preset", list(YARN))
@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_yarn_scaled_models_equal_transformers(preset: str, policy: str, tmp_path) -> None:
    folder = str(make_model(preset, tmp_path, overrides={"rope_parameters": YARN[preset]}))
    config = transformers.AutoConfig.from_pretrained(folder)
    assert config.rope_parameters["rope_type"] == "yarn"  # transformers reads it as yarn too
    engine = LLMEngine(EngineConfig(folder, policy=policy, num_blocks=64, block_size=4, max_batch_tokens=16))
    try:
        got = [engine.generate([p], PARAMS)[0] for p in PROMPTS]
        ours = engine.runner.full_logits(LONG, list(range(engine.blocks.blocks_for(len(LONG)))))
    finally:
        engine.close()
    assert [tokens for tokens, _ in reference(folder)] == got
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(torch.tensor([LONG])).logits[0]
    assert (ours - theirs).abs().max().item() <= 1e-4
