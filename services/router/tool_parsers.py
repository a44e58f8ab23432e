"""Tool calls in a model's output, one parser per model family (`--tool-call-parser`), and the grammar that makes
a model write calls in its family's format (tool_choice required or named).

hermes: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (Hermes, Qwen2.5/3); llama3_json: the
output is `{"name": ..., "parameters": {...}}`, several joined by "; " (Llama 3.1+); mistral:
`[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from services.common.grammars import json_rule


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI's API carries it


@dataclass(frozen=True, slots=True)
class Parsed:
    content: str  # the text outside the calls
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Function:
    """A tool the request offers: its name and its parameters' JSON schema."""

    name: str
    parameters: dict


def partial_marker(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (the marker may be cut there)."""
    return next((n for n in range(min(len(text), len(marker) - 1), 0, -1) if marker.startswith(text[-n:])), 0)


def _call(obj: object, args_key: str) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get("arguments", {}))
    return ToolCall(obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))


def _call_schema(function: Function, args_key: str) -> dict:
    return {"type": "object", "properties": {"name": {"const": function.name}, args_key: function.parameters},
            "required": ["name", args_key], "additionalProperties": False}


def _calls_grammar(functions: list[Function], args_key: str, separator: str | None, before: str = "",
                   after: str = "") -> str:
    """Calls written `before` + a call's JSON + `after`: one, or with a `separator` one or more."""
    alternatives = " | ".join(f"call_{i}" for i in range(len(functions)))
    rules = "\n".join(f"call_{i}: {json_rule(_call_schema(f, args_key), 'tools')}" for i, f in enumerate(functions))
    more = f" ({json.dumps(separator)} call)*" if separator is not None else ""
    wrapped = " ".join(part for part in (before and json.dumps(before), f"({alternatives})", after and json.dumps(after)) if part)
    return f"start: call{more}\ncall: {wrapped}\n{rules}"


class ToolParser(ABC):
    """A family's format: where calls start in the text, how they read, and the grammar that writes them."""

    name: str  # as --tool-call-parser names it (services/router/config.py)
    marker: str  # the text that opens the calls

    def parse(self, text: str) -> Parsed:
        """The calls in a whole output; an output whose calls do not parse is all content."""
        start = self.start(text)
        if start < 0:
            return Parsed(text, ())
        calls = self._calls(text[start:])
        return Parsed(text[:start].strip(), calls) if calls else Parsed(text, ())

    def start(self, text: str) -> int:
        """Where the calls begin in `text`, -1 when they do not (yet)."""
        return text.find(self.marker)

    def held(self, text: str) -> int:
        """How many characters at the end of `text` (no calls in it) may begin the calls: held back, streaming."""
        return partial_marker(text, self.marker)

    def ready(self, text: str) -> tuple[tuple[ToolCall, ...], int]:
        """Streaming: the calls complete at the start of `text` (from where the calls, or the calls not yet sent,
        begin) and the characters they take; a family whose calls read only whole has none before the end."""
        return (), 0

    @abstractmethod
    def grammar(self, functions: list[Function], parallel: bool) -> str:
        """A Lark grammar of one call (or, `parallel`, one or more) to any of `functions`."""

    @abstractmethod
    def _calls(self, text: str) -> tuple[ToolCall, ...]:
        """The calls of text that begins with them; () when they do not parse."""


class Hermes(ToolParser):
    name = "hermes"
    marker = "<tool_call>"
    _block = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
    _closed = re.compile(r"\s*<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def ready(self, text: str) -> tuple[tuple[ToolCall, ...], int]:
        """Each block once it is closed."""
        calls: list[ToolCall] = []
        at = 0
        while (block := self._closed.match(text, at)) is not None:
            try:
                call = _call(json.loads(block.group(1)), "arguments")
            except ValueError:
                break
            if call is None:
                break
            calls.append(call)
            at = block.end()
        return tuple(calls), at

    def _calls(self, text: str) -> tuple[ToolCall, ...]:
        calls = []
        for body in self._block.findall(text):
            try:
                call = _call(json.loads(body), "arguments")
            except ValueError:
                return ()
            if call is None:
                return ()
            calls.append(call)
        return tuple(calls)

    def grammar(self, functions: list[Function], parallel: bool) -> str:
        return _calls_grammar(functions, "arguments", "\n" if parallel else None, "<tool_call>\n", "\n</tool_call>")


class Llama3Json(ToolParser):
    name = "llama3_json"
    marker = "{"
    _tag = "<|python_tag|>"

    def start(self, text: str) -> int:
        """Calls are the whole output: it starts with `{` (or the python tag), whitespace aside."""
        stripped = text.lstrip()
        if stripped.startswith(self._tag) or stripped.startswith(self.marker):
            return len(text) - len(stripped)
        return -1

    def held(self, text: str) -> int:
        """All of it while it may still open with the python tag."""
        return len(text) if self._tag.startswith(text.lstrip()) else 0

    def ready(self, text: str) -> tuple[tuple[ToolCall, ...], int]:
        """Each object once it is closed."""
        decoder, calls = json.JSONDecoder(), []
        at = end = len(text) - len(text.lstrip().removeprefix(self._tag))
        while True:
            while at < len(text) and text[at] in "; \n\t":
                at += 1
            try:
                obj, at = decoder.raw_decode(text, at)
            except ValueError:
                return tuple(calls), end
            call = _call(obj, "parameters")
            if call is None:
                return tuple(calls), end
            calls.append(call)
            end = at

    def _calls(self, text: str) -> tuple[ToolCall, ...]:
        text = text.removeprefix(self._tag)
        decoder, calls, at = json.JSONDecoder(), [], 0
        while at < len(text):
            try:
                obj, at = decoder.raw_decode(text, at)
            except ValueError:
                return ()
            call = _call(obj, "parameters")
            if call is None:
                return ()
            calls.append(call)
            while at < len(text) and text[at] in "; \n\t":
                at += 1
        return tuple(calls)

    def grammar(self, functions: list[Function], parallel: bool) -> str:
        return _calls_grammar(functions, "parameters", "; " if parallel else None)


class Mistral(ToolParser):
    name = "mistral"
    marker = "[TOOL_CALLS]"

    def _calls(self, text: str) -> tuple[ToolCall, ...]:
        try:
            items = json.loads(text.removeprefix(self.marker))
        except ValueError:
            return ()
        calls = [_call(item, "arguments") for item in items] if isinstance(items, list) else [None]
        return () if None in calls else tuple(calls)

    def grammar(self, functions: list[Function], parallel: bool) -> str:
        items = {"anyOf": [_call_schema(f, "arguments") for f in functions]}
        array = {"type": "array", "items": items, "minItems": 1, **({} if parallel else {"maxItems": 1})}
        return f'start: "[TOOL_CALLS]" {json_rule(array, "tools")}'


PARSERS: dict[str, ToolParser] = {p.name: p for p in (Hermes(), Llama3Json(), Mistral())}
