"""Request bodies of the OpenAI-compatible API (pydantic at the boundary)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SamplingBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    max_tokens: int | None = Field(None, description="tokens to generate; the router's default when absent")
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = Field(0, description="extension: 0 = off")
    seed: int | None = None
    n: int = Field(1, description="independent samples; they share one prefill")
    best_of: int | None = Field(None, description="must equal n when given")
    stream: bool = False
    stop: str | list[str] | None = Field(None, description="up to 4 stop strings; the text ends before the first")
    stop_token_ids: list[int] = Field(default_factory=list, description="extension")
    ignore_eos: bool = Field(False, description="extension")
    logprobs: int | bool | None = None
    user: str | None = None


class CompletionBody(SamplingBody):
    prompt: str | list[int]


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class ChatBody(SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None


def chat_prompt(messages: list[ChatMessage]) -> str:
    """The plain chat template of the random-weight presets: one 'role: content' line each, then 'assistant:'."""
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"
