"""Our Llama and OPT against Hugging Face `transformers` on the same checkpoint folder (fp32)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

LLAMA3_TIED = {
    # original context 64: positions past it are where Llama-3 scaling changes the low frequencies
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64},
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}
PROMPTS = [[1, 72, 105, 33], [1, *range(100, 140)], [1, *(3 + (i * 37) % 256 for i in range(150))]]
NEW_TOKENS = 32


@pytest.fixture(scope="module", params=["llama-gqa", "llama3-rope-tied", "opt"])
def model_dir(request, tiny_llama_dir: str, tiny_opt_dir: str, tmp_path_factory) -> str:
    if request.param == "llama-gqa":
        return tiny_llama_dir  # 4 query heads share 2 KV heads
    if request.param == "opt":
        return tiny_opt_dir
    return str(make_model("tiny-llama", tmp_path_factory.mktemp("llama3"), seed=1, overrides=LLAMA3_TIED))


@pytest.fixture(scope="module")
def engine(model_dir: str) -> Iterator[LLMEngine]:
    engine = LLMEngine(EngineConfig(model_dir, num_blocks=128, block_size=4))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference(model_dir: str):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # 32 tokens whatever they are, as ignore_eos does
    return model


def test_logits_match_transformers(engine: LLMEngine, reference) -> None:
    for prompt in PROMPTS:
        table = list(range(127, 127 - engine.blocks.blocks_for(len(prompt)), -1))  # descending, non-contiguous order
        ours = engine.runner.full_logits(prompt, table)
        with torch.no_grad():
            theirs = reference(torch.tensor([prompt])).logits[0]
        assert (ours - theirs).abs().max().item() <= 1e-4


def test_greedy_tokens_match_transformers_generate(engine: LLMEngine, reference) -> None:
    ours = engine.generate(PROMPTS, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
    for prompt, tokens in zip(PROMPTS, ours):
        with torch.no_grad():
            theirs = reference.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
        assert tokens == theirs[0, len(prompt):].tolist()
    assert len({tuple(t) for t in ours}) == len(PROMPTS)


def test_llama3_scaling_is_in_effect(tmp_path: Path) -> None:
    """The scaled checkpoint gives other logits than the same weights without scaling, past the original context."""
    plain = {k: v for k, v in LLAMA3_TIED.items() if k != "rope_scaling"}
    engines = [LLMEngine(EngineConfig(str(make_model("tiny-llama", tmp_path / name, seed=1, overrides=ov)), num_blocks=64))
               for name, ov in (("scaled", LLAMA3_TIED), ("plain", plain))]
    prompt = PROMPTS[2]
    scaled, unscaled = (e.runner.full_logits(prompt, list(range(e.blocks.blocks_for(len(prompt))))) for e in engines)
    assert (scaled[100:] - unscaled[100:]).abs().max().item() > 1e-2
    for e in engines:
        e.close()


@pytest.mark.parametrize("text", ["Hello, world!", "  spaces\tand\nlines  ", "ünïcödé 日本語 🙂", ""])
def test_transformers_tokenizer_gives_our_ids(model_dir: str, text: str) -> None:
    ours = load_tokenizer(model_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = ours.encode(text)
    assert theirs(text)["input_ids"] == ids
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True) == text
