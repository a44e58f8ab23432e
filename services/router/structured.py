"""A request body's structured output (OpenAI's response_format, vLLM's structured_outputs, a chat's forced tool
calls) as the Lark grammar the engines enforce (services/common/grammars.py); a bad one is refused naming its
field."""

from __future__ import annotations

from services.common.errors import EngineInputError
from services.common.grammars import after_reasoning, any_json_object, check, from_json_schema, structured_grammar
from services.router.chat_output import THINK_END, ChatParsers
from services.router.openai_models import ChatBody, CompletionBody, ResponseFormat, StructuredOutputs
from services.router.tools import tools_grammar


def request_grammar(body: CompletionBody | ChatBody, parsers: ChatParsers) -> str:
    """The grammar of the whole output: a chat's forced tool calls over its response format; with a reasoning
    parser, applied after the reasoning."""
    grammar = body_grammar(body.response_format, body.structured_outputs)
    if isinstance(body, ChatBody):
        grammar = tools_grammar(body.tools, body.tool_choice, body.parallel_tool_calls, parsers.tools) or grammar
        if grammar and parsers.reasoning:
            grammar = check(after_reasoning(grammar, THINK_END), "messages")
    return grammar


def body_grammar(response_format: ResponseFormat | None, structured: StructuredOutputs | None) -> str:
    """The grammar the output must follow; "" when the body asks for none."""
    if response_format is not None and response_format.type != "text":
        if structured is not None:
            raise EngineInputError("structured_outputs", "give response_format or structured_outputs, not both")
        if response_format.type == "json_object":
            return any_json_object()
        if response_format.json_schema is None:
            raise EngineInputError("response_format.json_schema", "is required with type json_schema")
        return from_json_schema(response_format.json_schema.json_schema, "response_format.json_schema.schema")
    if structured is None:
        return ""
    return structured_grammar(json=structured.json_, json_object=structured.json_object, regex=structured.regex,
                              choice=structured.choice, grammar=structured.grammar, field="structured_outputs")
