"""Model folders as instruct checkpoints are published: chat special tokens in the tokenizer, a chat template in
the ChatML, Llama-3 or Gemma style (written here, after the published ones), their special tokens in
tokenizer_config.json."""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|eot_id|>", "<bos>", "<start_of_turn>", "<end_of_turn>")

CHATML = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are helpful.' }}{%- endif %}
{{- "\\n\\n# Tools\\n\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role != 'system' %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA3 = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = "" %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
{{- "You may call these functions:\\n\\n" }}
{%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
{%- endif %}
{%- if documents %}{%- for d in documents %}{{- "Document: " + d.title + "\\n" + d.text + "\\n\\n" }}{%- endfor %}{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
{%- if messages[0]['content'] is string -%}{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}{%- endif -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}{%- set first_user_prefix = "" -%}{%- set loop_messages = messages -%}{%- endif -%}
{%- for message in loop_messages -%}
{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
{%- endif -%}
{%- if (message['role'] == 'assistant') -%}{%- set role = "model" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}
{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
{%- if message['content'] is string -%}{{ message['content'] | trim }}
{%- elif message['content'] is iterable -%}
{%- for item in message['content'] -%}{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}
{%- else -%}{{ raise_exception("Invalid content type") }}{%- endif -%}
{{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}
"""

STYLES = {  # template, bos, eos
    "chatml": (CHATML, None, "<|im_end|>"),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "gemma": (GEMMA, "<bos>", "<end_of_turn>"),
}


def add_chat_tokens(folder: Path) -> None:
    """Renames the padding tokens that `make-model` adds past the bytes to the chat tokens (the vocab must have room)."""
    path = folder / "tokenizer.json"
    raw = json.loads(path.read_text())
    pads = [t for t in raw["added_tokens"] if t["content"].startswith("<|pad")]
    assert len(pads) >= len(CHAT_TOKENS), "make the folder with a larger vocab_size"
    for entry, token in zip(pads, CHAT_TOKENS):
        entry["content"] = token
    path.write_text(json.dumps(raw))


def publish(folder: Path, style: str, file: bool = True) -> Path:
    """Gives a folder made by `make-model` (vocab_size >= 259 + 9) the chat tokens and a template of the style, in
    chat_template.jinja (`file`) or in tokenizer_config.json."""
    template, bos, eos = STYLES[style]
    add_chat_tokens(folder)
    config_path = folder / "tokenizer_config.json"
    config = {**json.loads(config_path.read_text()), "bos_token": bos, "eos_token": eos}
    if file:
        (folder / "chat_template.jinja").write_text(template)
    else:
        config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=1))
    return folder
