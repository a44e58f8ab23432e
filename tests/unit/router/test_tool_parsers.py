"""Tool calls per model family: parsed out of the text, written by their grammar, and streamed in pieces that add
up to the whole message (reasoning, content and calls alike); a grammar after reasoning holds the answer only."""

from __future__ import annotations

import json

import llguidance
import pytest

from services.common.grammars import after_reasoning, check, from_choice
from services.engine.grammar import tokenizer_for
from services.router.chat_output import THINK_END, ChatDelta, ChatOutput
from services.router.tool_parsers import PARSERS, Function, ToolCall

WEATHER = Function("weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                               "additionalProperties": False})
TIME = Function("time", {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"],
                         "additionalProperties": False})
CALLS = (ToolCall("weather", '{"city": "Oslo"}'), ToolCall("time", '{"zone": "utc"}'))
WRITTEN = {  # the two calls as each family writes them (compact JSON: what the grammar makes)
    "hermes": '<tool_call>\n{"name":"weather","arguments":{"city":"Oslo"}}\n</tool_call>\n'
              '<tool_call>\n{"name":"time","arguments":{"zone":"utc"}}\n</tool_call>',
    "llama3_json": '{"name":"weather","parameters":{"city":"Oslo"}}; {"name":"time","parameters":{"zone":"utc"}}',
    "mistral": '[TOOL_CALLS][{"name":"weather","arguments":{"city":"Oslo"}},{"name":"time","arguments":{"zone":"utc"}}]',
}


def _same(calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("family", sorted(WRITTEN))
def test_each_family_parses_its_calls_and_leaves_plain_text_as_content(family: str) -> None:
    parser = PARSERS[family]
    parsed = parser.parse(WRITTEN[family])
    assert _same(parsed.calls) == _same(CALLS) and parsed.content == ""
    assert parser.parse("It is sunny.").calls == ()
    broken = WRITTEN[family][:-3]
    assert parser.parse(broken).calls == () or family == "hermes"  # hermes: an unclosed last block still parses


@pytest.mark.parametrize("family", sorted(WRITTEN))
def test_each_familys_grammar_writes_its_calls_and_nothing_else(family: str, tiny_llama_dir: str) -> None:
    tokenizer = tokenizer_for(tiny_llama_dir, 259, (2,))
    parser = PARSERS[family]

    def accepts(grammar: str, text: str) -> bool:
        matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
        return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()

    assert accepts(parser.grammar([WEATHER, TIME], parallel=True), WRITTEN[family])
    one = parser.parse(WRITTEN[family]).calls[0]
    single = WRITTEN[family].split("\n<tool_call>")[0].split("; ")[0]
    if family == "mistral":
        single = single.split(',{"name":"time"')[0] + "]"
    assert parser.parse(single).calls == (one,)
    assert accepts(parser.grammar([WEATHER, TIME], parallel=False), single)
    assert not accepts(parser.grammar([WEATHER, TIME], parallel=False), WRITTEN[family])  # one call only
    assert not accepts(parser.grammar([TIME], parallel=True), single)  # weather is not offered


def _streamed(output: ChatOutput, text: str, step: int) -> ChatDelta:
    total = ChatDelta()
    for i in range(0, len(text), step):
        total = total.add(output.push(text[i : i + step]))
    return total.add(output.finish())


@pytest.mark.parametrize("family", sorted(WRITTEN))
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_streamed_pieces_add_up_to_the_whole_message(family: str, step: int) -> None:
    text = "<think>the user wants weather</think>" + WRITTEN[family]
    whole = _streamed(ChatOutput(True, PARSERS[family]), text, len(text))
    assert whole.reasoning == "the user wants weather" and _same(whole.calls) == _same(CALLS)
    streamed = _streamed(ChatOutput(True, PARSERS[family]), text, step)
    assert (streamed.reasoning, streamed.content, streamed.calls) == (whole.reasoning, whole.content, whole.calls)


@pytest.mark.parametrize("family", ["hermes", "llama3_json"])
def test_a_call_is_sent_as_soon_as_it_closes(family: str) -> None:
    output = ChatOutput(False, PARSERS[family])
    first_end = WRITTEN[family].index("}}") + 2 + len("\n</tool_call>" if family == "hermes" else "")
    sent = [output.push(ch).calls for ch in WRITTEN[family]]
    assert _same([c for piece in sent[:first_end] for c in piece]) == _same(CALLS[:1])
    assert _same([c for piece in sent for c in piece] + output.finish().calls) == _same(CALLS)


def test_a_broken_call_after_good_ones_is_content() -> None:
    text = WRITTEN["hermes"].replace('"zone":"utc"', '"zone":utc')
    whole = _streamed(ChatOutput(False, PARSERS["hermes"]), text, len(text))
    assert _same(whole.calls) == _same(CALLS[:1]) and whole.content.startswith("\n<tool_call>")
    assert _streamed(ChatOutput(False, PARSERS["hermes"]), text, 1) == whole


@pytest.mark.parametrize("step", [1, 2, 1000])
def test_text_that_only_looks_like_a_call_or_a_tag_is_content(step: int) -> None:
    text = "<tool_ca is not a call; {json} is not either"
    for family in WRITTEN:
        out = _streamed(ChatOutput(False, PARSERS[family]), text, step)
        assert (out.content, out.calls) == (text, [])
    out = _streamed(ChatOutput(True, None), "<thin", step)  # no </think>: all reasoning
    assert (out.reasoning, out.content) == ("<thin", "")


def test_a_grammar_after_reasoning_leaves_the_reasoning_free_and_holds_the_answer(tiny_llama_dir: str) -> None:
    tokenizer = tokenizer_for(tiny_llama_dir, 259, (2,))
    grammar = check(after_reasoning(from_choice(["yes", "no"], "f"), THINK_END), "f")

    def matcher() -> llguidance.LLMatcher:
        return llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)

    free = matcher()
    assert free.consume_tokens(tokenizer.tokenize_str("<think>maybe {not json} <think")) and not free.is_accepting()
    assert free.consume_tokens(tokenizer.tokenize_str("</think>"))
    mask = free.compute_bitmask()  # after the reasoning: only the answer's first bytes
    allowed = {t for t in range(259) if mask[t // 8] >> (t % 8) & 1}
    assert allowed == set(tokenizer.tokenize_str("y") + tokenizer.tokenize_str("n"))
    assert free.consume_tokens(tokenizer.tokenize_str("no")) and free.is_accepting()
    assert not matcher().consume_tokens(tokenizer.tokenize_str("<think>ok</think>maybe"))
