"""Request bodies of the OpenAI-compatible API (pydantic at the boundary).

Every field is honoured or refused: an unknown field is a 400 naming it, and so is a known OpenAI field this
server does not implement (UNSUPPORTED).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.common.generation_config import SamplingDefaults

# OpenAI fields refused with 400 "not supported" (the rest of the unknown fields get "unknown field").
UNSUPPORTED = frozenset({
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format", "audio",
    "modalities", "prediction", "web_search_options", "reasoning_effort", "suffix", "service_tier", "store",
    "metadata",
})


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


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


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[TextPart] = Field(description="a string, or a list of text parts")
    name: str | None = None


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
        return {"messages": [m.model_dump(exclude_none=True) for m in messages],
                "add_generation_prompt": self.add_generation_prompt,
                "continue_final_message": self.continue_final_message, "documents": self.documents,
                **self.chat_template_kwargs}


class ChatBody(SamplingBody, ChatOptions):
    messages: list[ChatMessage] = Field(min_length=1)
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

