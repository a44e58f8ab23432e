"""Structured output requests become one Lark grammar, or a refusal naming the field and what is wrong."""

from __future__ import annotations

import pytest

from services.common.errors import EngineInputError
from services.common.grammars import structured_grammar


@pytest.mark.parametrize("kwargs, field, says", [
    ({"json": {"type": "array", "uniqueItems": True}}, "structured_outputs.json", "uniqueItems"),
    ({"json": "{not json"}, "structured_outputs.json", "not valid JSON"),
    ({"json": {"type": "objekt"}}, "structured_outputs.json", "objekt"),
    ({"regex": "[a-"}, "structured_outputs.regex", "invalid regex"),
    ({"regex": ""}, "structured_outputs.regex", "empty"),
    ({"choice": []}, "structured_outputs.choice", "non-empty"),
    ({"grammar": "root ::= ("}, "structured_outputs.grammar", "not a GBNF grammar"),
    ({"grammar": "start: undefined_rule"}, "structured_outputs.grammar", "undefined_rule"),
    ({"regex": "a", "choice": ["b"]}, "structured_outputs", "regex, choice"),
])
def test_a_bad_structured_output_is_refused_naming_its_field(kwargs: dict, field: str, says: str) -> None:
    with pytest.raises(EngineInputError) as err:
        structured_grammar(**kwargs)
    assert err.value.field == field and says in str(err.value)


def test_each_kind_compiles_and_none_asks_nothing() -> None:
    assert structured_grammar() == ""
    for kwargs in ({"json": {}}, {"json": '{"type": "integer"}'}, {"json_object": True}, {"regex": "a/b+"},
                   {"choice": ["yes", 'say "no"']}, {"grammar": 'start: "x" NUM\nNUM: /[0-9]+/'},
                   {"grammar": 'root ::= answer\nanswer ::= "yes" | "no"'}):
        assert structured_grammar(**kwargs).startswith("start:"), kwargs
