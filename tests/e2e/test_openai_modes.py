"""The official `openai` client in every mode: prompt logprobs (echo + logprobs) equal `transformers`, and the n
choices of a request share one prefill, with every KV block back afterwards (also when the client leaves)."""

from __future__ import annotations

import time

import openai
import pytest
import torch

from services.common.sampling import SamplingParams, choice_seed
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import generate, instance_stats, wait_idle

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
PROMPT = "the prefill phase is compute bound"
K = 3


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{stack.config.host}:{stack.config.http_port}/v1", api_key="unused", max_retries=0)


# session-scoped: pytest groups this module's tests by conftest's stack, between other modules' tests
@pytest.fixture(scope="session")
def prompt_ids(tiny_llama_dir: str) -> list[int]:
    return load_tokenizer(tiny_llama_dir).encode(PROMPT)


@pytest.fixture(scope="session")
def want_prompt_logprobs(tiny_llama_dir: str, prompt_ids: list[int]) -> torch.Tensor:
    """log-softmax of `transformers` at each prompt position but the last: [L - 1, V]."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([prompt_ids])).logits[0, :-1].float(), dim=-1)


def _assert_prompt_part(lp, want: torch.Tensor, prompt_ids: list[int], tokenizer) -> None:
    """The first len(prompt_ids) entries of a completion's logprobs: null, then transformers' values."""
    n = len(prompt_ids)
    assert lp.tokens[:n] == [tokenizer.token_text(t) for t in prompt_ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:n] == pytest.approx([want[p, prompt_ids[p + 1]].item() for p in range(n - 1)], abs=1e-4)
    top_values, top_ids = want.topk(K, dim=-1)
    for p in range(n - 1):  # keyed by text as OpenAI's format is: byte tokens may share one
        expected = {tokenizer.token_text(i): v for i, v in zip(top_ids[p].tolist(), top_values[p].tolist())}
        top = lp.top_logprobs[p + 1]
        assert set(top) == set(expected)
        assert [top[t] for t in expected] == pytest.approx(list(expected.values()), abs=1e-4)


async def test_echo_with_logprobs_gives_prompt_logprobs_equal_to_transformers(
        stack, client: openai.OpenAI, tiny_llama_dir: str, prompt_ids: list[int], want_prompt_logprobs) -> None:
    tokenizer = load_tokenizer(tiny_llama_dir)
    args = {"model": "", "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": K, "echo": True,
            "extra_body": {"ignore_eos": True}}
    result = client.completions.create(**args)
    lp = result.choices[0].logprobs
    assert result.choices[0].text.startswith(PROMPT) and len(lp.tokens) == len(prompt_ids) + 3
    _assert_prompt_part(lp, want_prompt_logprobs, prompt_ids, tokenizer)
    events = list(client.completions.create(stream=True, **args))
    assert "".join(e.choices[0].text for e in events) == result.choices[0].text
    assert [x for e in events for x in e.choices[0].logprobs.token_logprobs] == lp.token_logprobs
    # n choices: each has the prompt's logprobs, computed once
    pair = client.completions.create(**{**args, "n": 2, "temperature": 1.0, "seed": 5})
    for choice in pair.choices:
        _assert_prompt_part(choice.logprobs, want_prompt_logprobs, prompt_ids, tokenizer)
    # the gRPC API: prompt_logprobs on a choice's first message
    responses = await generate(stack.router_address, PROMPT, max_tokens=2, temperature=0.0, prompt_logprobs=1)
    got = responses[0].prompt_logprobs
    assert [t.token_id for t in got] == prompt_ids[1:] and all(len(t.top_ids) == 1 for t in got)
    assert all(not r.prompt_logprobs for r in responses[1:])
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


async def test_n_choices_share_one_prompt_step_and_free_every_block(
        stack, client: openai.OpenAI, tiny_llama_dir: str, prompt_ids: list[int]) -> None:
    await wait_idle(stack)
    since = time.time()
    result = client.completions.create(model="", prompt=PROMPT, n=4, max_tokens=8, temperature=1.0, seed=77,
                                       extra_body={"ignore_eos": True, "cache_salt": f"n-choices-{time.time()}"})
    steps = [step for s in instance_stats(stack, since) for step in s.step_log]
    assert [(st.kind, st.tokens) for st in steps if st.kind != "decode"] == [("prefill", len(prompt_ids))]
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    try:
        want = engine.generate([prompt_ids] * 4, [SamplingParams(max_tokens=8, temperature=1.0, seed=choice_seed(77, i),
                                                                 ignore_eos=True) for i in range(4)])
    finally:
        engine.close()
    assert [c.token_ids for c in result.choices] == want and len({tuple(w) for w in want}) == 4
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)
    # a client that leaves mid-stream: every choice stops and its blocks come back
    stream = client.completions.create(model="", prompt=PROMPT, n=4, max_tokens=400, temperature=1.0, stream=True,
                                       extra_body={"ignore_eos": True})
    for _, _ in zip(stream, range(6)):
        pass
    stream.close()
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats) and all(s.running == 0 for s in stats)


async def test_a_choice_ended_by_a_stop_string_stops_computing(stack, client: openai.OpenAI,
                                                              prompt_ids: list[int]) -> None:
    """n = 2, one choice stopped early by a stop string: the instances compute its tokens only up to about
    there, not to max_tokens, while the other choice runs on."""
    body = dict(model="", prompt=PROMPT, n=2, max_tokens=200, temperature=1.0, seed=5, extra_body={"ignore_eos": True})
    full = [c.text for c in client.completions.create(**body).choices]
    k, stop = next((k, full[0][k:k + 4]) for k in range(1, 40)
                   if full[0].find(full[0][k:k + 4]) == k and full[0][k:k + 4] not in full[1])
    await wait_idle(stack)
    since = time.time()
    result = client.completions.create(**body, stop=[stop])
    assert [c.text for c in result.choices] == [full[0][:k], full[1]]
    assert [c.finish_reason for c in result.choices] == ["stop", "length"]
    await wait_idle(stack)
    computed = sum(step.tokens for s in instance_stats(stack, since) for step in s.step_log) - len(prompt_ids)
    assert computed < 200 + 100, f"{computed} tokens computed: the stopped choice ran on"
