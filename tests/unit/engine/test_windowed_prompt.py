"""A sliding-window layer's long prompt attends in query pieces over the keys its window reaches
(`attention._windowed_prompt`): the same outputs as the whole masked prompt, and transformers' tokens."""

from __future__ import annotations

import pytest
import torch

from services.common.sampling import SamplingParams
from services.engine.attention import WINDOW_PIECE, AttentionSpec, _attend, _prompt_mask, _windowed_prompt
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model
from tests.family_reference import assert_equal

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize(("n", "start", "first", "window", "kv_heads", "softcap"), [
    (700, 0, 0, 100, 4, None), (1000, 300, 200, 64, 2, None), (1300, 0, 0, 300, 4, 30.0)])
def test_pieces_equal_the_whole_masked_prompt(n: int, start: int, first: int, window: int, kv_heads: int,
                                              softcap: float | None) -> None:
    torch.manual_seed(0)
    q = torch.randn(1, 4, n, 16)
    k, v = torch.randn(2, 1, kv_heads, start + n - first, 16)
    spec = AttentionSpec(0.25, window, softcap)
    whole = _attend(q, k, v, _prompt_mask(first, start, n, window, q.device), spec, kv_heads != 4)
    assert torch.allclose(_windowed_prompt(q, k, v, first, start, spec, kv_heads != 4), whole, atol=1e-6)


@pytest.mark.parametrize("preset", ["tiny-mistral", "tiny-gemma2"])
def test_a_prompt_many_windows_long_gives_transformers_tokens(preset: str, tmp_path) -> None:
    folder = str(make_model(preset, tmp_path / preset))
    prompt = [1, *(3 + (i * 37) % 256 for i in range(WINDOW_PIECE + 100))]  # past one piece: the windowed path
    params = SamplingParams(max_tokens=4, ignore_eos=True, logprobs=1)
    engine = LLMEngine(EngineConfig(folder, num_blocks=512, block_size=4, max_batch_tokens=1024))
    try:
        engine.add_request("r", prompt, params)
        outs = [out for _ in range(20) if engine.has_work() for out in engine.step()]
    finally:
        engine.close()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        gen = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    want = (gen.sequences[0, len(prompt):].tolist(), torch.log_softmax(torch.cat(gen.logits).float(), -1))
    tokens = [t for out in outs for t in out.new_token_ids]
    assert_equal(tokens, [lp.logprob for out in outs for lp in out.logprobs], want)
