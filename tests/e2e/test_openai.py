"""The official `openai` client against the router's HTTP API gives the same tokens as local generation."""

from __future__ import annotations

import httpx
import openai
import pytest

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PROMPTS = ["user: hello\nassistant:", "the decode phase", "a b c d e f g"]


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    with running_stack(tiny_llama_dir, redis_url, mode="disagg") as stack:
        yield stack


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{stack.config.host}:{stack.config.http_port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir: str):
    tokenizer = load_tokenizer(tiny_llama_dir)
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=256))

    def generate(prompt: str, max_tokens: int) -> str:
        (ids,) = engine.generate([tokenizer.encode(prompt)], SamplingParams(max_tokens=max_tokens))
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


def test_models_and_health(stack, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [stack.config.model.rstrip("/").split("/")[-1]]
    assert httpx.get(f"http://{stack.config.host}:{stack.config.http_port}/health").json() == {"status": "ok"}


@pytest.mark.parametrize("body, param", [
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "temperature": -0.5}, "temperature"),
    ({"prompt": "", "max_tokens": 3}, "prompt"),
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": "hi", "n": 2}, "n"),
    ({"prompt": "hi", "model": "nope"}, "model"),
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
