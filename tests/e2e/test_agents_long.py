"""The issue's must-shows for agents at full size (long; test_agents.py runs a handful of each by default):
through the disaggregated stack 100 strict json_schema outputs, 100 required tool calls over 3 tools and 100
json_object outputs; a seeded constrained request gives the same tokens in disagg, colocated and chunked mode,
and after its decode instance is killed mid-stream."""

from __future__ import annotations

import asyncio
import json

import grpc
import jsonschema
import openai
import pytest
import redis

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.grammars import from_json_schema
from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import generate, recorded_requests, running_stack, wait_idle
from tests.e2e.test_agents import PARAMETERS, TOOLS, Trip

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]
N = 100
STRICT = {**Trip.model_json_schema(), "additionalProperties": False}
LONG = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 150}  # outlives a kill


@pytest.fixture(scope="module")
def stack(tiny_llama_dir: str, redis_url: str):
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", prefill=1, decode=2) as stack:
        yield stack


def _client(stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://{stack.config.host}:{stack.config.http_port}/v1", api_key="unused",
                              max_retries=0)


async def test_a_hundred_of_each_kind_validate(stack) -> None:
    client = _client(stack)
    messages = [[{"role": "user", "content": f"request {i}"}] for i in range(N)]
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": STRICT, "strict": True}}
    strict = await asyncio.gather(*(client.chat.completions.create(
        model="", messages=m, response_format=fmt, max_tokens=120, temperature=1.0, seed=i)
        for i, m in enumerate(messages)))
    assert any(r.usage.prompt_tokens_details.cached_tokens for r in strict)  # prefix caching took part
    for result in strict:
        assert result.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(result.choices[0].message.content), STRICT)
    calls = await asyncio.gather(*(client.chat.completions.create(
        model="", messages=m, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=200,
        temperature=1.0, seed=i) for i, m in enumerate(messages)))
    for result in calls:
        (call,) = result.choices[0].message.tool_calls
        assert result.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])
    assert len({c.choices[0].message.tool_calls[0].function.name for c in calls}) == 3  # every tool gets called
    objects = await asyncio.gather(*(client.chat.completions.create(
        model="", messages=m, response_format={"type": "json_object"}, max_tokens=1000, temperature=1.0, seed=i)
        for i, m in enumerate(messages)))
    for result in objects:
        choice = result.choices[0]
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
        else:  # the random model's object outgrew max_tokens: cut, and said so
            assert choice.finish_reason == "length"
            with pytest.raises(ValueError):
                json.loads(choice.message.content)
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


def _local(tiny_llama_dir: str, prompt: str, params: SamplingParams) -> list[int]:
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=256))
    try:
        return engine.generate([load_tokenizer(tiny_llama_dir).encode(prompt)], params)[0]
    finally:
        engine.close()


async def test_seeded_tokens_are_the_same_in_every_mode(stack, tiny_llama_dir: str, redis_url: str) -> None:
    structured = {"json": json.dumps(STRICT)}
    asks = [("trip one", 1), ("trip two", 2), ("trip three", 3)]

    async def tokens(address: str) -> list[list[int]]:
        return [[t for r in await generate(address, p, max_tokens=120, temperature=1.0, seed=s,
                                           structured_outputs=structured) for t in r.token_ids] for p, s in asks]

    disagg = await tokens(stack.router_address)
    for mode in ("colocated", "chunked"):
        with running_stack(tiny_llama_dir, f"{redis_url.rsplit('/', 1)[0]}/7", mode=mode) as other:
            assert await tokens(other.router_address) == disagg, mode
    grammar = from_json_schema(STRICT, "structured_outputs.json")
    assert disagg == [_local(tiny_llama_dir, p, SamplingParams(max_tokens=120, temperature=1.0, seed=s, grammar=grammar))
                      for p, s in asks]


async def test_a_constrained_stream_survives_its_decode_instance_killed(stack, tiny_llama_dir: str) -> None:
    """The last test on this module's stack: it kills an instance 40 tokens into the stream. The router re-prefills
    prompt + those tokens and the matcher reads them first: the whole output equals an uninterrupted local run."""
    prompt, n = "a long list", 1200
    request = router_pb2.GenerateRequest(prompt=prompt, request_id="victim", max_tokens=n, temperature=1.0,
                                         structured_outputs=router_pb2.StructuredOutputs(json=json.dumps(LONG)))
    book = redis.Redis.from_url(stack.redis_url)
    got: list[int] = []
    async with grpc.aio.insecure_channel(stack.router_address) as channel:
        async for response in router_pb2_grpc.RouterStub(channel).Generate(request, timeout=120):
            if len(got) < 40 <= len(got) + len(response.token_ids):
                busy = max(book.zrange("ds:load:decode", 0, -1, withscores=True), key=lambda kv: kv[1])[0].decode()
                next(p for p in stack.procs if p.name == busy).process.kill()
            got.extend(response.token_ids)
            reason = response.finish_reason
    seed = int({r["label"]: r for r in recorded_requests(stack.redis_url)}["victim"]["seed"])
    want = _local(tiny_llama_dir, prompt, SamplingParams(max_tokens=n, temperature=1.0, seed=seed,
                                                         grammar=from_json_schema(LONG, "structured_outputs.json")))
    assert got == want and len(got) > 300  # 150 strings at least: the kill was early in the stream
    text = load_tokenizer(tiny_llama_dir).decode(got)
    if reason == "stop":
        jsonschema.validate(json.loads(text), LONG)


async def test_a_reasoning_router_returns_reasoning_content(tiny_llama_dir: str, redis_url: str) -> None:
    """A random-weight model never writes </think>: its whole output is reasoning, streamed as such, and a
    structured output waits behind it (the grammar's reasoning part lets any text through)."""
    with running_stack(tiny_llama_dir, f"{redis_url.rsplit('/', 1)[0]}/7", mode="colocated",
                       router_settings={"reasoning_parser": "think"}) as other:
        client = _client(other)
        args = {"model": "", "messages": [{"role": "user", "content": "think"}], "max_tokens": 24, "seed": 9}
        whole = (await client.chat.completions.create(**args)).choices[0]
        reasoning = whole.message.model_extra["reasoning_content"]
        assert reasoning and whole.message.content == "" and whole.finish_reason == "length"
        parts = [e.choices[0].delta.model_extra.get("reasoning_content") or ""
                 async for e in await client.chat.completions.create(stream=True, **args) if e.choices]
        assert "".join(parts) == reasoning
        fmt = {"type": "json_object"}
        held = (await client.chat.completions.create(response_format=fmt, **args)).choices[0]
        assert held.finish_reason == "length" and held.message.model_extra["reasoning_content"]
