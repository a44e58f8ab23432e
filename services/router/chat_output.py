"""A chat choice's text split as OpenAI's API returns it: reasoning (`<think>...</think>`, `--reasoning-parser`),
content, and tool calls (`--tool-call-parser`); streamed, text that may open a part is held back until it is
known, so that the deltas add up to the non-streamed message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from services.router.tool_parsers import PARSERS, ToolCall, ToolParser, partial_marker

THINK_START, THINK_END = "<think>", "</think>"


@dataclass(frozen=True, slots=True)
class ChatParsers:
    """How the router reads chat outputs (`--reasoning-parser`, `--tool-call-parser`)."""

    reasoning: bool = False
    tools: ToolParser = PARSERS["hermes"]


@dataclass(slots=True)
class ChatDelta:
    reasoning: str = ""
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, other: ChatDelta) -> ChatDelta:
        return ChatDelta(self.reasoning + other.reasoning, self.content + other.content, self.calls + other.calls)


def _without_start(text: str) -> str:
    """Reasoning text without its opening tag (all of it held while it may still be the tag)."""
    if THINK_START.startswith(text):
        return ""
    return text.removeprefix(THINK_START)


class ChatOutput:
    """Feeds a choice's text in pieces; each piece gives the delta that is certain so far."""

    def __init__(self, reasoning: bool, tools: ToolParser | None) -> None:
        self.reasoning_parser = reasoning
        self.thinking = reasoning  # the reasoning parser: everything before </think> is reasoning
        self.tools = tools
        self.reasoning = ""  # the text before </think>, so far
        self.reasoning_sent = 0  # of its visible part, how many characters were sent
        self.content = ""  # every content character so far
        self.sent = 0  # of `content`, how many were sent as content
        self.in_calls = False
        self.calls_at = 0  # of `content`, where the calls not yet sent begin (with in_calls)
        self.calls_sent = 0

    def choice_body(self, text: str, reason: str | None, stream: bool) -> tuple[dict, str | None]:
        """A chat choice's `delta` (stream: this piece of text) or `message` (the whole text), and its finish
        reason: `tool_calls` when it ended by calling tools."""
        part = self.push(text)
        if reason:
            part = part.add(self.finish())
        if not stream:
            body = message(part, self.reasoning_parser)
        else:
            body = {"role": "assistant", "content": part.content}
            if part.reasoning:
                body["reasoning_content"] = part.reasoning
            if part.calls:
                body["tool_calls"] = call_items(part.calls, self.calls_sent)
        self.calls_sent += len(part.calls)
        return body, ("tool_calls" if reason == "stop" and self.calls_sent else reason)

    def push(self, text: str) -> ChatDelta:
        delta = ChatDelta()
        if self.thinking:
            self.reasoning += text
            end = self.reasoning.find(THINK_END)
            certain = self.reasoning[:end] if end >= 0 else self.reasoning[: len(self.reasoning) - partial_marker(self.reasoning, THINK_END)]
            delta.reasoning = self._reasoning(_without_start(certain))
            if end < 0:
                return delta
            self.thinking, text = False, self.reasoning[end + len(THINK_END) :]
        self.content += text
        delta.content = self._content()
        if self.in_calls:
            calls, used = self.tools.ready(self.content[self.calls_at :])
            delta.calls = list(calls)
            self.calls_at += used
            self.sent = self.calls_at  # the calls' text is never content
        return delta

    def _reasoning(self, visible: str) -> str:
        out, self.reasoning_sent = visible[self.reasoning_sent :], len(visible)
        return out

    def _content(self) -> str:
        if self.tools is None:
            out, self.sent = self.content[self.sent :], len(self.content)
            return out
        if self.in_calls:
            return ""
        start = self.tools.start(self.content)
        if start >= 0:
            self.in_calls = True
            out, self.sent, self.calls_at = self.content[self.sent : start], start, start
            return out
        end = len(self.content) - self.tools.held(self.content)
        out, self.sent = self.content[self.sent : end], max(self.sent, end)
        return out

    def finish(self) -> ChatDelta:
        """What was held back, once the text is complete: the calls, or text that turned out to be content."""
        if self.thinking:  # no </think>: all of it was reasoning
            self.thinking = False
            return ChatDelta(reasoning=self._reasoning(self.reasoning.removeprefix(THINK_START)))
        if self.tools is None:
            return ChatDelta()
        rest = self.content[self.calls_at :].lstrip("; \n\t") if self.in_calls else ""
        if self.in_calls and not rest:  # every call was sent as it closed
            self.sent = len(self.content)
            return ChatDelta()
        parsed = self.tools.parse(rest) if rest else None
        if parsed is not None and parsed.calls and not parsed.content:
            self.sent = len(self.content)
            return ChatDelta(calls=list(parsed.calls))
        rest, self.sent = self.content[self.sent :], len(self.content)
        return ChatDelta(content=rest)


def call_items(calls: list[ToolCall], first: int) -> list[dict]:
    """OpenAI's tool_calls entries (each with its index among the choice's calls: delta form)."""
    return [{"index": first + i, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def message(delta: ChatDelta, reasoning: bool) -> dict:
    """A whole choice's message: content null when it only calls tools."""
    out: dict = {"role": "assistant", "content": delta.content if delta.content or not delta.calls else None}
    if reasoning:
        out["reasoning_content"] = delta.reasoning or None
    if delta.calls:
        out["tool_calls"] = [{k: v for k, v in item.items() if k != "index"} for item in call_items(delta.calls, 0)]
    return out
