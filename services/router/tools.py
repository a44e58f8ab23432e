"""A chat request's tools and tool_choice: checked (each tool's parameter schema compiles, a named choice is one of
the tools), and for `required` or a named function, the grammar that makes the model call (tool_parsers.py)."""

from __future__ import annotations

from services.common.errors import EngineInputError
from services.common.grammars import check, json_rule
from services.router.openai_models import NamedToolChoice, Tool
from services.router.tool_parsers import Function, ToolParser


def tools_grammar(tools: list[Tool] | None, choice: str | NamedToolChoice | None, parallel: bool,
                  parser: ToolParser) -> str:
    """The grammar of the calls the model must make; "" when it may answer in text (none, auto, no tools)."""
    if not tools:
        if choice not in (None, "none"):
            raise EngineInputError("tool_choice", "needs tools")
        return ""
    functions = [Function(t.function.name, t.function.parameters) for t in tools]
    names = [f.name for f in functions]
    if len(set(names)) < len(names):
        raise EngineInputError("tools", "function names must be unique")
    for i, f in enumerate(functions):
        check(f"start: {json_rule(f.parameters, f'tools[{i}].function.parameters')}", f"tools[{i}].function.parameters")
    if choice in (None, "none", "auto"):
        return ""
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise EngineInputError("tool_choice.function.name", f"{choice.function.name!r} is not one of the tools")
        return parser.grammar([functions[names.index(choice.function.name)]], parallel=False)
    return parser.grammar(functions, parallel)
