"""Structured output as one Lark grammar (llguidance's dialect): what a request's JSON schema, JSON object, regex,
choice or grammar becomes at the front door, checked there so that a bad one is refused before anything is
allocated. The Lark text is what travels to the engines (`SamplingParams.grammar`), which compile it against
their tokenizer (services/engine/grammar.py).
"""

from __future__ import annotations

import json

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from services.common.errors import EngineInputError

COMPACT = {"whitespace_flexible": False}  # JSON without free whitespace: a model cannot pad its output forever


def _literal(text: str) -> str:
    """A Lark string literal (JSON escapes are Lark's)."""
    return json.dumps(text)


def json_rule(schema: dict, field: str) -> str:
    """The right-hand side of a rule that matches a JSON value valid against `schema` (compact JSON)."""
    if not isinstance(schema, dict):
        raise EngineInputError(field, "a JSON schema must be a JSON object")
    options = {**COMPACT, **schema.get("x-guidance", {})}
    return f"%json {json.dumps({**schema, 'x-guidance': options})}"


def from_json_schema(schema: dict, field: str) -> str:
    return check(f"start: {json_rule(schema, field)}", field)


def any_json_object() -> str:
    return f"start: {json_rule({'type': 'object'}, 'response_format')}"


def from_regex(pattern: str, field: str) -> str:
    if not pattern:
        raise EngineInputError(field, "must not be empty")
    return check(f"start: /{pattern.replace('/', chr(92) + '/')}/", field)


def from_choice(choices: list[str], field: str) -> str:
    if not choices or not all(isinstance(c, str) and c for c in choices):
        raise EngineInputError(field, "must be a non-empty list of non-empty strings")
    return check("start: " + " | ".join(_literal(c) for c in choices), field)


def from_grammar(text: str, field: str) -> str:
    """A Lark grammar as given, or a GBNF one (llama.cpp's, as vLLM takes it: `root ::= ...`) in Lark."""
    if "::=" in text:
        try:
            text = gbnf_to_lark(text).removeprefix("%llguidance {}").strip()
        except Exception as exc:  # the converter raises what its parser meets; the field is the user's
            raise EngineInputError(field, f"not a GBNF grammar: {exc}") from None
    return check(text, field)


def structured_grammar(*, json: str | dict | None = None, json_object: bool = False, regex: str | None = None,
                       choice: list[str] | None = None, grammar: str | None = None,
                       field: str = "structured_outputs") -> str:
    """vLLM's `structured_outputs` (one kind at most) as a Lark grammar; "" when none is given."""
    given = [k for k, v in (("json", json), ("json_object", json_object or None), ("regex", regex),
                            ("choice", choice), ("grammar", grammar)) if v is not None]
    if len(given) > 1:
        raise EngineInputError(field, f"give one of json, json_object, regex, choice, grammar (got {', '.join(given)})")
    if json is not None:
        return from_json_schema(_schema(json, f"{field}.json"), f"{field}.json")
    if json_object:
        return any_json_object()
    if regex is not None:
        return from_regex(regex, f"{field}.regex")
    if choice is not None:
        return from_choice(choice, f"{field}.choice")
    return "" if grammar is None else from_grammar(grammar, f"{field}.grammar")


def _schema(schema: str | dict, field: str) -> dict:
    if isinstance(schema, dict):
        return schema
    try:
        return json.loads(schema)
    except ValueError as exc:
        raise EngineInputError(field, f"not valid JSON: {exc}") from None


def after_reasoning(grammar: str, end: str) -> str:
    """`grammar` applied after the reasoning: any text up to the first `end` (`</think>`), then the grammar's
    start rule (its other rules kept; they must not be named `reasoning` or `answer_start`)."""
    body = grammar.replace("start:", "answer_start:", 1)
    return f"start: reasoning answer_start\nreasoning[lazy]: /(?s:.*){_escape(end)}/\n{body}"


def _escape(text: str) -> str:
    """`text` as a literal inside a Lark regex (Rust regex syntax, `/` delimited)."""
    return "".join(f"\\{c}" if c in r"\.+*?()|[]{}^$#&-~/" else c for c in text)


def check(grammar: str, field: str) -> str:
    """The grammar, when llguidance compiles it; else EngineInputError naming `field` (an invalid schema, a feature
    the engine lacks such as `uniqueItems`, a bad regex)."""
    error = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(grammar))
    if error:
        raise EngineInputError(field, error.splitlines()[0])
    return grammar
