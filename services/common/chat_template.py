"""Chat templates as published: the model folder's own jinja templates, rendered in a sandbox the way transformers'
`apply_chat_template` renders them; the presets' plain 'role: content' template where a folder has none.

`ChatTemplate.render(messages, tools=..., add_generation_prompt=...)` gives the prompt text; `encode` its ids.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from services.common.errors import EngineInputError
from services.common.tokenizer import Tokenizer

log = logging.getLogger(__name__)

# The presets' template: no BOS of its own (encoding adds it), one line per message, then the assistant's turn;
# tools listed first, an assistant's calls written as the hermes tool-call parser reads them.
PLAIN_TEMPLATE = (
    "{% if tools %}system: tools: {{ tools | tojson }}; call one as <tool_call>\n"
    '{"name": ..., "arguments": {...}}\n</tool_call>{{ "\\n" }}{% endif %}'
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n"
    '{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}\n</tool_call>{% endfor %}'
    '{{ "\\n" }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}'
)
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
RENDER_ARGUMENTS = frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"})
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' marker of where the final message ends


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}` (transformers marks assistant spans with it): renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters; transformers' does not, and takes these options.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _Dict:
    """`dict(...)` without the class itself in reach of the template (type tricks)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore names, as transformers' sandbox does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template cannot store {name!r} on a namespace")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=_Dict(), namespace=_Namespace)
    return env


_ENV = _environment()


def _loops_over_content(source: str) -> bool:
    """Whether the template iterates over a message's content (it takes a list of parts) or prints it (a string):
    vLLM's content-format detection. A name set from `...content` counts as the content, and so does the content
    through a filter or a slice (`message['content'] | selectattr('type', 'equalto', 'text')`)."""
    tree = _ENV.parse(source)

    def is_content(node: nodes.Node, aliases: set[str]) -> bool:
        if isinstance(node, nodes.Filter | nodes.Test) or (isinstance(node, nodes.Getitem)
                                                           and isinstance(node.arg, nodes.Slice)):
            return node.node is not None and is_content(node.node, aliases)
        if isinstance(node, nodes.Name):
            return node.name in aliases
        if isinstance(node, nodes.Getattr):
            return node.attr == "content"
        return isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "content"

    aliases = {a.target.name for a in tree.find_all(nodes.Assign)
               if isinstance(a.target, nodes.Name) and is_content(a.node, set())}
    return any(is_content(loop.iter, aliases) for loop in tree.find_all(nodes.For))


@dataclass(frozen=True, slots=True)
class _Compiled:
    template: jinja2.Template
    takes_parts: bool  # content given as a list of {"type": "text", "text": ...} parts; else one string


def _compile(source: str) -> _Compiled:
    return _Compiled(_ENV.from_string(source), _loops_over_content(source))


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A model's chat templates by name ("default", "tool_use", ...) and the special tokens they may print."""

    sources: dict[str, str]
    special_tokens: dict[str, str] = field(default_factory=dict)
    plain: bool = False  # the presets' template: encoding adds the BOS token the template does not print
    compiled: dict[str, _Compiled] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "compiled", {name: _compile(src) for name, src in self.sources.items()})
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"chat template: {exc.message} (line {exc.lineno})") from None

    def pick(self, tools: Sequence[dict] | None) -> str:
        """The template a request uses, as transformers picks it: "tool_use" when tools are given and it exists."""
        if len(self.sources) == 1:
            return next(iter(self.sources))
        if tools is not None and "tool_use" in self.sources:
            return "tool_use"
        if "default" in self.sources:
            return "default"
        raise EngineInputError("messages", f"the model has chat templates {sorted(self.sources)} and none is 'default'")

    def render(self, messages: Sequence[dict], *, tools: Sequence[dict] | None = None,
               documents: Sequence[dict] | None = None, add_generation_prompt: bool = True,
               continue_final_message: bool = False, **kwargs: Any) -> str:
        """The prompt text of the messages (dicts as OpenAI's API has them: content a string or a list of text
        parts). `kwargs` reach the template too (chat_template_kwargs, e.g. enable_thinking). Raises
        EngineInputError on "messages" with the template's own message when it refuses them."""
        if continue_final_message and add_generation_prompt:
            raise EngineInputError("continue_final_message", "cannot go with add_generation_prompt")
        if not messages:
            raise EngineInputError("messages", "must not be empty")
        compiled = self.compiled[self.pick(tools)]
        chat = [{k: _content(v, compiled.takes_parts) if k == "content" else v for k, v in m.items() if v is not None}
                for m in messages]
        final = _tag_final(chat) if continue_final_message else ""
        try:
            text = compiled.template.render({**self.special_tokens, **kwargs}, messages=chat, tools=tools,
                                            documents=documents, add_generation_prompt=add_generation_prompt)
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise EngineInputError("messages", f"the chat template refused them: {exc}") from None
        return _cut_at_tag(text, final) if continue_final_message else text

    def encode(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """The prompt ids of rendered text: the template printed its special tokens (the plain one: BOS added)."""
        return tokenizer.encode(text, add_special_tokens=self.plain)


def template_variables(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A request's chat_template_kwargs, refused (EngineInputError) where one names an argument of `render`."""
    taken = sorted(kwargs.keys() & RENDER_ARGUMENTS)
    if taken:
        raise EngineInputError("chat_template_kwargs", f"{', '.join(taken)}: a request field, not a template variable")
    return kwargs


def _content(content: Any, takes_parts: bool) -> Any:
    """Content in the form the template reads: a list of parts kept, or their texts joined by newlines (vLLM's)."""
    if isinstance(content, str) or takes_parts:
        return content
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def _tag_final(chat: list[dict]) -> str:
    """Marks the end of the final message (transformers' way to continue it); returns its text."""
    content = chat[-1].get("content")
    if isinstance(content, str):
        chat[-1]["content"] = content + CONTINUE_TAG
        return content
    for part in reversed(content or []):
        if "text" in part:
            text, part["text"] = part["text"], part["text"] + CONTINUE_TAG
            return text
    raise EngineInputError("continue_final_message", "the final message has no text to continue")


def _cut_at_tag(text: str, final: str) -> str:
    if final.strip() not in text or CONTINUE_TAG.strip() not in text:
        raise EngineInputError("continue_final_message", "the chat template dropped part of the final message")
    at = text.rindex(CONTINUE_TAG.strip())
    return text[:at] if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG else text[:at].rstrip()


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict with its content."""
    return value.get("content") if isinstance(value, dict) else value


def _special_tokens(folder: Path, config: dict) -> dict[str, str]:
    legacy = folder / "special_tokens_map.json"
    raw = {**(json.loads(legacy.read_text()) if legacy.exists() else {}), **config}
    extra = raw.get("extra_special_tokens")
    names = (*NAMED_TOKENS, *(extra if isinstance(extra, dict) else {}))
    merged = {**raw, **(extra if isinstance(extra, dict) else {})}
    return {name: text for name in names if isinstance(text := _token_text(merged.get(name)), str)}


def _folder_templates(folder: Path, config: dict) -> dict[str, str]:
    """The folder's templates as transformers finds them: chat_template.jinja and additional_chat_templates/*.jinja
    over tokenizer_config.json's `chat_template` (a string, or a list of {name, template})."""
    raw = config.get("chat_template")
    if raw is None and (processor := folder / "chat_template.json").exists():
        raw = json.loads(processor.read_text()).get("chat_template")
    templates = {t["name"]: t["template"] for t in raw} if isinstance(raw, list) else ({"default": raw} if raw else {})
    files = {"default": folder / "chat_template.jinja",
             **{p.stem: p for p in sorted((folder / "additional_chat_templates").glob("*.jinja"))}}
    found = {name: path.read_text() for name, path in files.items() if path.is_file()}
    return found or templates


def load_chat_template(folder: str | Path, template_file: str = "") -> ChatTemplate:
    """The chat template a model is served with: `template_file` (--chat-template) when given, else the folder's
    own, else the presets' plain one (logged)."""
    folder = Path(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    special = _special_tokens(folder, config)
    if template_file:
        return ChatTemplate({"default": Path(template_file).read_text()}, special)
    templates = _folder_templates(folder, config)
    if templates:
        return ChatTemplate(templates, special)
    log.info("%s has no chat template: chat prompts use the plain 'role: content' template", folder)
    return plain_chat_template(special)


def plain_chat_template(special_tokens: dict[str, str] | None = None) -> ChatTemplate:
    """The presets' template (their folders have none)."""
    return ChatTemplate({"default": PLAIN_TEMPLATE}, special_tokens or {}, plain=True)
