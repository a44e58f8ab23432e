"""Chat prompts as transformers' `apply_chat_template(..., add_generation_prompt=True)` makes them, for ChatML-,
Llama-3- and Gemma-style templates, with tools, documents, multi-part content and named templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.chat_template import ChatTemplate, load_chat_template
from services.common.errors import EngineInputError
from services.common.tokenizer import load_tokenizer
from services.engine.make_model import write_tokenizer
from services.router.openai_models import ChatBody
from tests.chat_folders import LLAMA3, STYLES, publish

transformers = pytest.importorskip("transformers")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Wetter für eine Stadt",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
PARTS = [{"type": "text", "text": "first part"}, {"type": "text", "text": "second part "}]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": PARTS}]


def _folder(tmp_path: Path, style: str, file: bool = True) -> Path:
    write_tokenizer(tmp_path, 288)
    return publish(tmp_path, style, file)


def _ours(folder: Path, messages: list[dict], **kwargs) -> list[int]:
    template = load_chat_template(folder)
    return template.encode(load_tokenizer(folder), template.render(messages, **kwargs))


def _hf(hf, messages: list[dict], **kwargs) -> list[int]:
    return hf.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)


def _joined(messages: list[dict]) -> list[dict]:
    """The messages as a template that prints content sees them: text parts joined by newlines (vLLM's way)."""
    return [{**m, "content": m["content"] if isinstance(m["content"], str) else "\n".join(p["text"] for p in m["content"])}
            for m in messages]


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
def test_chat_prompt_ids_equal_transformers_apply_chat_template(tmp_path: Path, style: str, tools) -> None:
    folder = _folder(tmp_path, style)
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    takes_parts = style == "gemma"  # Gemma's template walks the parts; the others print the content
    want = _hf(hf, CHAT if takes_parts else _joined(CHAT), tools=tools, add_generation_prompt=True)
    assert _ours(folder, CHAT, tools=tools) == want
    assert hf.decode(want).count("second part") == 1


def test_the_template_in_tokenizer_config_serves_as_the_file_does(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "llama3", file=False)
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    docs = [{"title": "Doc", "text": "Body text"}]
    want = _hf(hf, _joined(CHAT), documents=docs, add_generation_prompt=True, date_string="1 Jan 2026")
    assert _ours(folder, CHAT, documents=docs, date_string="1 Jan 2026") == want


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "chatml")
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": STYLES["chatml"][0]}, {"name": "tool_use", "template": LLAMA3}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    for tools in (None, TOOLS):
        assert _ours(folder, CHAT, tools=tools) == _hf(hf, _joined(CHAT), tools=tools, add_generation_prompt=True)


def test_continue_final_message_ends_the_prompt_inside_the_assistant_turn(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "chatml")
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    chat = [*CHAT[:2], {"role": "assistant", "content": "The answer is"}]
    want = _hf(hf, chat, continue_final_message=True)
    assert _ours(folder, chat, add_generation_prompt=False, continue_final_message=True) == want
    assert hf.decode(want).endswith("The answer is")
    with pytest.raises(EngineInputError) as err:
        _ours(folder, chat, continue_final_message=True)
    assert err.value.field == "continue_final_message"


def test_a_template_that_raises_refuses_the_messages_with_its_own_message(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "gemma")
    with pytest.raises(EngineInputError, match="roles must alternate") as err:
        _ours(folder, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert err.value.field == "messages"


def test_the_sandbox_keeps_a_template_from_python_internals() -> None:
    escape = ChatTemplate({"default": "{{ messages.__class__.__mro__ }}{{ namespace(_x=1) }}"})
    with pytest.raises(EngineInputError, match="messages"):
        escape.render([{"role": "user", "content": "x"}])


def test_a_folder_without_a_template_gets_the_plain_one_and_its_bos(tiny_llama_dir: str, tmp_path: Path) -> None:
    template = load_chat_template(tiny_llama_dir)
    tokenizer = load_tokenizer(tiny_llama_dir)
    text = template.render([{"role": "user", "content": PARTS}])
    assert text == "user: first part\nsecond part \nassistant:"
    assert template.encode(tokenizer, text) == tokenizer.encode(text)  # BOS first, as completions have it
    override = tmp_path / "t.jinja"
    override.write_text("{{ bos_token }}<{{ messages[0].content }}>")
    assert load_chat_template(tiny_llama_dir, str(override)).render([{"role": "user", "content": "x"}]) == "<s><x>"


def test_template_kwargs_cannot_stand_in_for_request_fields() -> None:
    body = ChatBody(messages=[{"role": "user", "content": "x"}], chat_template_kwargs={"tools": [], "enable_thinking": 1})
    with pytest.raises(EngineInputError, match="tools: a request field") as err:
        body.template_args(body.messages)
    assert err.value.field == "chat_template_kwargs"
    body = ChatBody(messages=[{"role": "user", "content": "x"}], chat_template_kwargs={"enable_thinking": False})
    assert body.template_args(body.messages)["enable_thinking"] is False


@pytest.mark.parametrize("loop", ["message['content'] | selectattr('type', 'equalto', 'text')", "parts[:]", "parts"])
def test_a_template_that_walks_the_parts_gets_them_however_it_reaches_them(loop: str) -> None:
    source = ("{% for message in messages %}{% set parts = message.content %}"
              f"{{% for p in {loop} %}}[{{{{ p.text }}}}]{{% endfor %}}{{% endfor %}}")
    assert ChatTemplate({"default": source}).render([{"role": "user", "content": PARTS}]) == "[first part][second part ]"
