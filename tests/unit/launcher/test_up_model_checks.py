"""`distserve up --model DIR` refuses, before starting anything, a folder it could not serve, saying why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from services.cli import build_parser
from services.engine.make_model import make_model


def _up(folder: Path, *flags: str) -> None:
    args = build_parser().parse_args(["up", "--model", str(folder), "--planner-port", "0", *flags])
    args.func(args)


@pytest.fixture
def folder(tiny_llama_dir: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_llama_dir, tmp_path / "m"))


def test_an_unsupported_model_type_names_itself_and_the_supported_ones(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(SystemExit, match=r"unsupported model_type 'gpt2'; supported: opt, llama, mistral, qwen2"):
        _up(folder)


def test_a_sentencepiece_only_tokenizer_and_a_broken_template_are_refused(folder: Path) -> None:
    (folder / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(SystemExit, match="chat template: Unexpected end of template"):
        _up(folder)
    with pytest.raises(SystemExit, match="missing.jinja"):
        _up(folder, "--chat-template", str(folder / "missing.jinja"))
    (folder / "tokenizer.json").rename(folder / "tokenizer.model")
    with pytest.raises(SystemExit, match="tokenizer.model but no tokenizer.json"):
        _up(folder)


@pytest.mark.timeout(60)  # a check that let the layout through would start the stack
def test_expert_groups_the_model_cannot_take_name_the_role_flag(tmp_path: Path) -> None:
    folder = make_model("tiny-qwen3-moe", tmp_path / "m", overrides={"moe_intermediate_size": 50})
    with pytest.raises(SystemExit, match="--decode-ep: 3 expert groups do not divide the 2 TP ranks"):
        _up(folder, "--decode-tp", "2", "--decode-ep", "3")
    with pytest.raises(SystemExit, match="--prefill-ep: an expert's width 50 does not split over the 4 ranks"):
        _up(folder, "--prefill-tp", "4", "--prefill-ep", "1")
