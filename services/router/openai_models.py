"""Request bodies of the OpenAI-compatible API (pydantic at the boundary).

Every field is honoured or refused: an unknown field is a 400 naming it, and so is a known OpenAI field this
server does not implement (UNSUPPORTED).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.common.chat_template import template_variables
from services.common.generation_config import SamplingDefaults

# OpenAI fields refused with 400 "not supported" (the rest of the unknown fields get "unknown field").
UNSUPPORTED = frozenset({
    "functions", "function_call", "audio",
    "modalities", "prediction", "web_search_options", "reasoning_effort", "suffix", "service_tier", "store",
    "metadata",
})


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(max_length=64)
    description: str | None = None
    json_schema: dict = Field(default_factory=dict, alias="schema")  # `schema` would shadow BaseModel's
    strict: bool | None = Field(None, description="accepted; the schema is enforced either way")


class ResponseFormat(BaseModel):
    """OpenAI's response_format: text (no constraint), any JSON object, or JSON valid against a schema."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(BaseModel):
    """vLLM's structured_outputs: one of these constrains the output."""

    model_config = ConfigDict(extra="forbid")

    json_: dict | str | None = Field(None, alias="json", description="a JSON schema")
    json_object: bool = False
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = Field(None, description="a Lark grammar (llguidance's dialect), or GBNF (root ::= ...)")


class SamplingBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = ""
    max_tokens: int | None = Field(None, description="tokens to generate; the router's default when absent")
    temperature: float | None = Field(None, description="absent: the model's generation_config.json, else 1")
    top_p: float | None = Field(None, description="absent: the model's generation_config.json, else 1")
    top_k: int | None = Field(None, description="extension: 0 = off; absent: the model's generation_config.json, else off")
    seed: int | None = Field(None, description="absent: the router draws one (kept in the request record)")
    n: int = Field(1, description="independent samples; they share one prefill")
    best_of: int | None = Field(None, description=">= n: generated per prompt; the n of highest cumulative logprob return")
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = Field(None, description="up to 4 stop strings; the text ends before the first")
    stop_token_ids: list[int] = Field(default_factory=list, description="extension")
    ignore_eos: bool = Field(False, description="extension")
    user: str | None = Field(None, description="accepted; recorded nowhere")
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float | None = Field(None, description="extension (vLLM's): 1 = off; absent: the model's "
                                                                 "generation_config.json, else off")
    logit_bias: dict[int, float] | None = Field(None, description="token id -> bias added to its logit")
    min_tokens: int = Field(0, description="extension: EOS and stop tokens cannot end the output earlier")
    skip_special_tokens: bool = Field(True, description="extension (vLLM's): special tokens left out of the text")
    spaces_between_special_tokens: bool = Field(False, description="extension (vLLM's): with skip_special_tokens "
                                                                   "false, a space each side of a special token")
    cache_salt: str | None = Field(None, description="prefix caching (vLLM's name): only requests of one API key "
                                                     "and salt share cached K/V")
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = Field(None, description="extension (vLLM's)")

    def sampling(self, defaults: SamplingDefaults) -> dict[str, Any]:
        """temperature, top_p, top_k and repetition_penalty: as given, else the defaults."""
        return {name: given if (given := getattr(self, name)) is not None else value
                for name, value in asdict(defaults).items()}


class CompletionBody(SamplingBody):
    prompt: str | list[int] | list[str] | list[list[int]] = Field(description="one prompt, or a batch: a choice each")
    logprobs: int | None = Field(None, description="the sampled token's logprob and this many top ones (<= 20)")
    echo: bool = Field(False, description="the prompt's text before the completion")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: str = Field(description="JSON text")


class AssistantToolCall(BaseModel):
    """A call an assistant message made (a turn before): given back with the tools' answers."""

    model_config = ConfigDict(extra="forbid")

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[TextPart] | None = Field(None, description="a string, or a list of text parts; only an "
                                                                  "assistant message that calls tools may omit it")
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = Field(None, description="an assistant message's calls")
    tool_call_id: str | None = Field(None, description="a tool message: the call it answers")

    @model_validator(mode="after")
    def _content_or_calls(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required (only an assistant message with tool_calls may omit it)")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        return self

    def template_dict(self) -> dict[str, Any]:
        """The message as chat templates take it: a call's arguments as an object (the templates print them)."""
        out = self.model_dump(exclude_none=True)
        for call in out.get("tool_calls", ()):
            try:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            except ValueError:
                pass  # not JSON: the template gets the text as it came
        return out


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict = Field(default_factory=lambda: {"type": "object", "properties": {}},
                             description="a JSON schema of the arguments")
    strict: bool | None = Field(None, description="accepted; a call's arguments follow the schema whenever a "
                                                  "grammar writes them (tool_choice required or named)")


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionDef


class FunctionName(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionName


class ChatOptions(BaseModel):
    """How messages become a prompt through the model's chat template (vLLM's extensions)."""

    model_config = ConfigDict(extra="forbid")

    add_generation_prompt: bool = Field(True, description="end with the header of the assistant's turn")
    continue_final_message: bool = Field(False, description="end inside the final message, which the output continues "
                                                            "(with add_generation_prompt false)")
    documents: list[dict[str, Any]] | None = Field(None, description="for retrieval templates: dicts with title and text")
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict, description="more variables for the template")

    def template_args(self, messages: list[ChatMessage]) -> dict[str, Any]:
        """The keyword arguments of `RequestBuilder.chat_prompt` for these messages."""
        return {**template_variables(self.chat_template_kwargs), "messages": [m.template_dict() for m in messages],
                "add_generation_prompt": self.add_generation_prompt,
                "continue_final_message": self.continue_final_message, "documents": self.documents}


class ChatBody(SamplingBody, ChatOptions):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None, description="with tools: auto (default) lets the model choose; required and a named function make it "
                          "call (a grammar of the tools' schemas)")
    parallel_tool_calls: bool = Field(True, description="required: one call or more; false: exactly one")
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, description="with logprobs: this many top tokens per position (<= 20)")


class TokenizeBody(ChatOptions):
    """vLLM's POST /tokenize: a prompt, or chat messages through the chat template."""

    model: str = ""
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = Field(None, description="the special tokens the tokenizer adds (BOS): by default "
                                                              "as the completion endpoints add them")
    return_token_strs: bool = Field(False, description="also each token's text")


class DetokenizeBody(BaseModel):
    """vLLM's POST /detokenize."""

    model_config = ConfigDict(extra="forbid")

    model: str = ""
    tokens: list[int]

