"""Agents' traffic through the stack with the official `openai` client: structured output (response_format,
structured_outputs) and forced tool calls follow their schemas in every mode, streamed calls equal unstreamed
ones, and bad schemas or tool choices are a 400 naming the field."""

from __future__ import annotations

import json
from typing import Literal

import grpc
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from services.common.chat_template import load_chat_template
from services.common.tokenizer import load_tokenizer
from tests.e2e.helpers import generate, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ALL_MODES = pytest.mark.parametrize("stack", ["disagg", "colocated", "chunked"], indirect=True)
DISAGG = pytest.mark.parametrize("stack", ["disagg"], indirect=True)
USER = [{"role": "user", "content": "plan my trip"}]
TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "the forecast", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"seat": {"enum": ["aisle", "window"]}, "count": {"type": "integer", "minimum": 1,
                                                                                           "maximum": 4}},
        "required": ["seat", "count"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "clock", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["utc", "cet", "pst"]}}, "required": ["zone"],
        "additionalProperties": False}}},
]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


class Trip(BaseModel):
    city: str = Field(max_length=8)
    nights: int = Field(ge=1, le=9)
    kind: Literal["work", "leisure"]


@pytest.fixture(scope="module")
def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{stack.config.host}:{stack.config.http_port}/v1", api_key="unused",
                         max_retries=0)


@ALL_MODES
async def test_parse_with_a_pydantic_model_returns_the_parsed_object(stack, client: openai.OpenAI) -> None:
    for seed in range(3):
        result = client.chat.completions.parse(model="", messages=USER, response_format=Trip, max_tokens=120,
                                               temperature=1.0, seed=seed)
        choice = result.choices[0]
        assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Trip)
    # n > 1 shares one prefill: disaggregated, each decode samples its choice's first token under the grammar
    pair = client.chat.completions.parse(model="", messages=USER, response_format=Trip, max_tokens=120, n=2, seed=5)
    assert len(pair.choices) == 2 and all(isinstance(c.message.parsed, Trip) for c in pair.choices)
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 for s in stats)


@ALL_MODES
def test_required_tool_calls_validate_against_their_parameters(client: openai.OpenAI) -> None:
    for seed in range(3):
        result = client.chat.completions.create(model="", messages=USER, tools=TOOLS, tool_choice="required",
                                                parallel_tool_calls=False, max_tokens=200, temperature=1.0, seed=seed)
        choice = result.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


@DISAGG
def test_a_streamed_tool_call_assembled_from_its_deltas_equals_the_unstreamed_one(client: openai.OpenAI) -> None:
    args = {"model": "", "messages": USER, "tools": TOOLS, "max_tokens": 100, "temperature": 1.0, "seed": 11,
            "tool_choice": {"type": "function", "function": {"name": "book"}}}
    whole = client.chat.completions.create(**args).choices[0]
    calls: dict[int, dict] = {}
    reasons = []
    for event in client.chat.completions.create(stream=True, **args):
        for delta in event.choices[0].delta.tool_calls or ():
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
        reasons.append(event.choices[0].finish_reason)
    assert [(c.function.name, c.function.arguments) for c in whole.message.tool_calls] == \
        [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    assert whole.message.tool_calls[0].function.name == "book" and reasons[-1] == whole.finish_reason == "tool_calls"


@DISAGG
async def test_structured_outputs_of_every_kind_hold_on_both_apis(stack, client: openai.OpenAI) -> None:
    regex = client.completions.create(model="", prompt="zip:", max_tokens=20, temperature=1.0, seed=1,
                                      extra_body={"structured_outputs": {"regex": "[0-9]{5}"}}).choices[0]
    assert len(regex.text) == 5 and regex.text.isdigit() and regex.finish_reason == "stop"
    choice = client.completions.create(model="", prompt="ok?", max_tokens=20, temperature=1.0, seed=2,
                                       extra_body={"structured_outputs": {"choice": ["yes", "no"]}}).choices[0]
    assert choice.text in ("yes", "no")
    schema = {**Trip.model_json_schema(), "additionalProperties": False}
    responses = await generate(stack.router_address, "trip:", max_tokens=120, temperature=1.0, seed=3,
                               structured_outputs={"json": json.dumps(schema)})
    text = "".join(r.text for r in responses)
    assert responses[-1].finish_reason == "stop"
    jsonschema.validate(json.loads(text), schema)
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema, "strict": True}}
    short = client.chat.completions.create(model="", messages=USER, max_tokens=3, response_format=fmt).choices[0]
    assert short.finish_reason == "length"  # no Trip fits in 3 tokens: cut, never claimed complete


@DISAGG
async def test_bad_schemas_and_tool_choices_are_refused_naming_the_field(stack, client: openai.OpenAI) -> None:
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "array", "uniqueItems": True}}}}, "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
         "response_format.json_schema.schema"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice.function.name"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"structured_outputs": {"regex": "[a-"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ]
    for extra, field in cases:
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="", messages=USER, max_tokens=4, extra_body=extra)
        assert err.value.body["param"] == field, extra
    with pytest.raises(grpc.aio.AioRpcError) as rpc:
        await generate(stack.router_address, "x", structured_outputs={"json": '{"type": "array", "not": {}}'})
    assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rpc.value.details().startswith("structured_outputs.json:") and "not" in rpc.value.details()
    stats = await wait_idle(stack)
    assert all(s.blocks_used == 0 and s.waiting == 0 for s in stats)


@DISAGG
def test_the_next_turn_takes_the_calls_and_the_tools_answers(client: openai.OpenAI, tiny_llama_dir: str) -> None:
    first = client.chat.completions.create(model="", messages=USER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=100, seed=4).choices[0].message
    (call,) = first.tool_calls
    turn = [*USER, first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    result = client.chat.completions.create(model="", messages=turn, tools=TOOLS, max_tokens=4, seed=4)
    rendered = load_chat_template(tiny_llama_dir).render(
        [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                              for c in m.get("tool_calls", ())]} for m in turn], tools=TOOLS)
    assert f"<tool_call>\n{json.dumps({'name': call.function.name, 'arguments': json.loads(call.function.arguments)}, ensure_ascii=False)}" \
           in rendered and "tool: sunny, 21 C\nassistant:" in rendered
    assert result.usage.prompt_tokens == len(load_tokenizer(tiny_llama_dir).encode(rendered))
