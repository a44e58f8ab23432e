"""The official `openai` client against the router's HTTP API gives the same tokens as local generation."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams, choice_seed
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import instance_stats, wait_idle

# the disaggregated stack of conftest.py, shared with other modules
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.parametrize("stack", ["disagg"], indirect=True)]
PROMPTS = ["user: hello\nassistant:", "the decode phase", "a b c d e f g"]


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{stack.config.host}:{stack.config.http_port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir: str):
    tokenizer = load_tokenizer(tiny_llama_dir)
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=256))

    def generate(prompt: str, max_tokens: int, **sampling) -> str:
        (ids,) = engine.generate([tokenizer.encode(prompt)], SamplingParams(max_tokens=max_tokens, **sampling))
        return tokenizer.decode(ids)

    yield generate
    engine.close()


def test_completions_equal_local(client: openai.OpenAI, reference) -> None:
    for prompt in PROMPTS:
        result = client.completions.create(model="", prompt=prompt, max_tokens=10, temperature=0)
        assert result.choices[0].text == reference(prompt, 10)
        assert result.usage.completion_tokens <= 10


def test_streamed_completion_equals_unstreamed(client: openai.OpenAI, reference) -> None:
    stream = client.completions.create(model="", prompt=PROMPTS[1], max_tokens=12, temperature=0, stream=True)
    parts = [event.choices[0].text for event in stream]
    assert "".join(parts) == reference(PROMPTS[1], 12)
    assert len(parts) > 1


def test_chat_completions(client: openai.OpenAI, reference) -> None:
    result = client.chat.completions.create(model="", messages=[{"role": "user", "content": "hello"}],
                                            max_tokens=8, temperature=0)
    assert result.choices[0].message.content == reference("user: hello\nassistant:", 8)
    stream = client.chat.completions.create(model="", messages=[{"role": "user", "content": "hello"}],
                                            max_tokens=8, temperature=0, stream=True)
    assert "".join(e.choices[0].delta.content or "" for e in stream) == result.choices[0].message.content


def test_unseeded_samples_differ_and_a_seeded_one_repeats(client: openai.OpenAI) -> None:
    def text(**extra) -> str:
        return client.completions.create(model="", prompt=PROMPTS[0], max_tokens=12, temperature=1.0, **extra).choices[0].text

    assert len({text() for _ in range(3)}) == 3
    assert text(seed=1234) == text(seed=1234)


async def test_stop_strings_end_the_text_and_free_the_kv(stack, client: openai.OpenAI) -> None:
    args = {"model": "", "prompt": PROMPTS[2], "temperature": 0, "extra_body": {"ignore_eos": True}}
    full = client.completions.create(max_tokens=24, **args).choices[0].text
    stop = full[10:13]
    want = full[: full.index(stop)]
    result = client.completions.create(max_tokens=400, stop=[stop, "\u2603never"], **args)
    assert (result.choices[0].text, result.choices[0].finish_reason) == (want, "stop")
    assert result.usage.completion_tokens < 24
    events = list(client.completions.create(max_tokens=400, stop=stop, stream=True, **args))
    assert "".join(e.choices[0].text for e in events) == want and events[-1].choices[0].finish_reason == "stop"
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


async def test_n_choices_share_one_prefill(stack, client: openai.OpenAI, reference) -> None:
    since = time.time()
    result = client.completions.create(model="", prompt=PROMPTS[1], n=4, max_tokens=10, temperature=1.0, seed=77,
                                       extra_body={"ignore_eos": True, "cache_salt": f"n-choices-{since}"})
    prefills = [step for s in instance_stats(stack, since) if s.role == "prefill" for step in s.step_log]
    assert [step.tokens for step in prefills] == [result.usage.prompt_tokens]  # the prompt computed once, for four
    assert [c.index for c in result.choices] == [0, 1, 2, 3]
    want = [reference(PROMPTS[1], 10, temperature=1.0, seed=choice_seed(77, i), ignore_eos=True) for i in range(4)]
    assert [c.text for c in result.choices] == want and len(set(want)) == 4
    assert result.usage.completion_tokens == 40
    events = list(client.completions.create(model="", prompt=PROMPTS[1], n=4, max_tokens=10, temperature=1.0,
                                            seed=77, stream=True, extra_body={"ignore_eos": True}))
    assert ["".join(e.choices[0].text for e in events if e.choices[0].index == i) for i in range(4)] == want
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


def test_logprobs_of_completions_and_chat(client: openai.OpenAI, tiny_llama_dir: str) -> None:
    result = client.completions.create(model="", prompt=PROMPTS[0], max_tokens=6, temperature=0, logprobs=3,
                                       extra_body={"ignore_eos": True})
    lp = result.choices[0].logprobs
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    engine.add_request("r", load_tokenizer(tiny_llama_dir).encode(PROMPTS[0]),
                       SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3))
    want = [lp for outs in iter(engine.step, []) for out in outs for lp in out.logprobs]
    engine.close()
    assert lp.token_logprobs == pytest.approx([w.logprob for w in want], abs=1e-5)
    assert len(lp.tokens) == len(lp.top_logprobs) == 6 and all(len(top) <= 3 for top in lp.top_logprobs)
    assert lp.text_offset[0] == 0 and lp.tokens[-1] in result.choices[0].text  # a byte token alone may not decode
    events = list(client.completions.create(model="", prompt=PROMPTS[0], max_tokens=6, temperature=0, logprobs=3,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert [x for e in events for x in e.choices[0].logprobs.token_logprobs] == lp.token_logprobs
    chat = client.chat.completions.create(model="", messages=[{"role": "user", "content": "hello"}], max_tokens=4,
                                          temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)
    assert all(c.logprob == pytest.approx(c.top_logprobs[0].logprob) for c in content)  # greedy: the top token


def test_echo_max_completion_tokens_and_streamed_usage(client: openai.OpenAI) -> None:
    result = client.completions.create(model="", prompt=PROMPTS[2], max_tokens=5, temperature=0, echo=True)
    plain = client.completions.create(model="", prompt=PROMPTS[2], max_tokens=5, temperature=0)
    assert result.choices[0].text == PROMPTS[2] + plain.choices[0].text
    chat = client.chat.completions.create(model="", messages=[{"role": "user", "content": "hi"}],
                                          max_completion_tokens=3, temperature=0, extra_body={"ignore_eos": True},
                                          user="someone")
    assert chat.usage.completion_tokens == 3
    events = list(client.completions.create(model="", prompt=PROMPTS[2], max_tokens=4, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == 4


def test_logit_bias_and_min_tokens(client: openai.OpenAI, tiny_llama_dir: str) -> None:
    biased = client.completions.create(model="", prompt=PROMPTS[0], max_tokens=4, temperature=0,
                                       logit_bias={"77": 100}, extra_body={"ignore_eos": True})
    assert biased.choices[0].token_ids == [77] * 4
    eos = ModelConfig.from_folder(tiny_llama_dir).eos_token_ids[0]
    ends = client.completions.create(model="", prompt=PROMPTS[0], max_tokens=20, temperature=0,
                                     logit_bias={str(eos): 100}, extra_body={"min_tokens": 5})
    assert ends.usage.completion_tokens == 6 and ends.choices[0].finish_reason == "stop"


def test_a_batch_of_prompts_gets_a_choice_each(client: openai.OpenAI, reference, tiny_llama_dir: str) -> None:
    ids = load_tokenizer(tiny_llama_dir).encode(PROMPTS[2])
    result = client.completions.create(model="", prompt=PROMPTS[:2], max_tokens=5, temperature=0)
    assert [c.text for c in result.choices] == [reference(p, 5) for p in PROMPTS[:2]]
    by_ids = client.completions.create(model="", prompt=[ids, ids], max_tokens=5, temperature=0, n=2, echo=True)
    assert [c.index for c in by_ids.choices] == [0, 1, 2, 3]
    assert {c.text for c in by_ids.choices} == {PROMPTS[2] + reference(PROMPTS[2], 5)}
    assert by_ids.usage.prompt_tokens == 2 * len(ids)


def test_best_of_returns_the_choices_of_highest_cumulative_logprob(client: openai.OpenAI) -> None:
    args = {"model": "", "prompt": PROMPTS[1], "max_tokens": 6, "temperature": 1.0, "seed": 11}
    all_three = client.completions.create(n=3, logprobs=0, **args).choices
    ranked = sorted(all_three, key=lambda c: -sum(c.logprobs.token_logprobs))
    best = client.completions.create(n=2, best_of=3, **args).choices
    assert [c.text for c in best] == [c.text for c in ranked[:2]] and best[0].logprobs is None


def test_models_and_health(stack, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [stack.config.model.rstrip("/").split("/")[-1]]
    assert httpx.get(f"http://{stack.config.host}:{stack.config.http_port}/health").json() == {"status": "ok"}


@pytest.mark.parametrize("body, param", [
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "temperature": -0.5}, "temperature"),
    ({"prompt": "", "max_tokens": 3}, "prompt"),
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": "hi", "n": 0}, "n"),
    ({"prompt": "hi", "n": 2, "best_of": 1}, "best_of"),
    ({"prompt": "hi", "n": 1, "best_of": 2, "stream": True}, "best_of"),
    ({"prompt": "hi", "model": "nope"}, "model"),
    ({"prompt": "hi", "logprobs": 21}, "logprobs"),
    ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "hi", "tools": [{"type": "function"}]}, "tools"),  # a chat field
    ({"prompt": "hi", "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema"),
    ({"prompt": "hi", "functions": []}, "functions"),
    ({"prompt": "hi", "audio": {}}, "audio"),
    ({"prompt": "hi", "no_such_field": 1}, "no_such_field"),
])
async def test_bad_bodies_get_400_naming_the_field(stack, body: dict, param: str) -> None:
    url = f"http://{stack.config.host}:{stack.config.http_port}/v1/completions"
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json=body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and param in (error["param"] or "")
        ok = await http.post(url, json={"prompt": "fine", "max_tokens": 2})
        assert ok.status_code == 200
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)
