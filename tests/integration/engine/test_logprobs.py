"""Sampled tokens' logprobs equal the log-softmax of `transformers` on the same weights (fp32): the top-k ids
are the same and the values within 1e-4, for greedy and sampled requests batched together."""

from __future__ import annotations

import pytest
import torch

from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

PROMPTS = [[1, 72, 105, 33], [1, *range(100, 130)]]
K = 5


def test_logprobs_equal_transformers_log_softmax(tiny_llama_dir: str) -> None:
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    params = [SamplingParams(max_tokens=8, ignore_eos=True, logprobs=K),
              SamplingParams(max_tokens=8, ignore_eos=True, logprobs=K, temperature=1.0, seed=3),
              SamplingParams(max_tokens=8, ignore_eos=True)]  # batched with one that asks for none
    for rid, prompt, p in zip("abc", [*PROMPTS, PROMPTS[0]], params):
        engine.add_request(rid, prompt, p)
    outs: dict[str, list] = {"a": [], "b": [], "c": []}
    while engine.has_work():
        for out in engine.step():
            outs[out.request_id].extend(out.logprobs)
    engine.close()
    assert outs["c"] == [] and len(outs["a"]) == len(outs["b"]) == 8

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    for prompt, got in zip(PROMPTS, (outs["a"], outs["b"])):
        ids = prompt + [t.token_id for t in got]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
        want = torch.log_softmax(logits.float(), dim=-1)
        top_values, top_ids = want.topk(K, dim=-1)
        for pos, item in enumerate(got):
            assert [i for i, _ in item.top] == top_ids[pos].tolist()
            assert [v for _, v in item.top] == pytest.approx(top_values[pos].tolist(), abs=1e-4)
            assert item.logprob == pytest.approx(want[pos, item.token_id].item(), abs=1e-4)


@pytest.mark.parametrize("policy, max_batch_tokens", [("colocated", 512), ("chunked", 8), ("prefill", 512)])
def test_prompt_logprobs_equal_transformers_in_every_policy(tiny_llama_dir: str, policy: str,
                                                            max_batch_tokens: int) -> None:
    """Chunked with an 8-token budget: the 31-token prompt spans four chunks, batched with a request that asks
    for none."""
    engine = LLMEngine(EngineConfig(tiny_llama_dir, policy=policy, num_blocks=64, max_batch_tokens=max_batch_tokens))
    engine.add_request("plain", PROMPTS[0], SamplingParams(max_tokens=2, ignore_eos=True))
    engine.add_request("asks", PROMPTS[1], SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=K))
    firsts = {}
    while engine.has_work():
        for out in engine.step():
            firsts.setdefault(out.request_id, out)
            if out.prefilled:
                engine.release_prefilled(out.request_id)
    engine.close()
    assert firsts["plain"].prompt_logprobs == []
    got = firsts["asks"].prompt_logprobs
    prompt = PROMPTS[1]
    assert [t.token_id for t in got] == prompt[1:]
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        want = torch.log_softmax(model(torch.tensor([prompt])).logits[0, :-1].float(), dim=-1)
    top_values, top_ids = want.topk(K, dim=-1)
    for pos, item in enumerate(got):
        assert [i for i, _ in item.top] == top_ids[pos].tolist()
        assert [v for _, v in item.top] == pytest.approx(top_values[pos].tolist(), abs=1e-4)
        assert item.logprob == pytest.approx(want[pos, prompt[pos + 1]].item(), abs=1e-4)
