"""The tokenizer as transformers loads a published folder: tokenizer_config.json's added and special tokens,
skip_special_tokens and spaces_between_special_tokens in the output text, and a clear refusal of a folder with
only a SentencePiece tokenizer.model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.tokenizer import load_tokenizer
from services.engine.make_model import write_tokenizer
from services.router.output_text import OutputText
from tests.chat_folders import publish

transformers = pytest.importorskip("transformers")
TEXT = "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """ChatML tokens ordinary in tokenizer.json, special in tokenizer_config.json's added_tokens_decoder."""
    write_tokenizer(tmp_path, 288)
    publish(tmp_path, "chatml")
    raw = json.loads((tmp_path / "tokenizer.json").read_text())
    decoder = {}
    for entry in raw["added_tokens"]:
        if entry["content"] in ("<|im_start|>", "<|im_end|>"):
            entry["special"] = False
            decoder[str(entry["id"])] = {**{k: entry[k] for k in ("content", "lstrip", "rstrip", "normalized",
                                                                 "single_word")}, "special": True}
    (tmp_path / "tokenizer.json").write_text(json.dumps(raw))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "added_tokens_decoder": decoder}))
    return tmp_path


def test_special_tokens_of_tokenizer_config_encode_and_decode_as_in_transformers(folder: Path) -> None:
    ours, hf = load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    ids = ours.encode(TEXT, add_special_tokens=False)
    assert ids == hf.encode(TEXT, add_special_tokens=False)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True) == "user\nhi there\nassistant\n"
    assert ours.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False) == TEXT


def test_spaces_between_special_tokens_and_incremental_text_agree(folder: Path) -> None:
    tokenizer = load_tokenizer(folder)
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    spaced = tokenizer.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=True)
    assert spaced == "<|im_start|> user\nhi there <|im_end|> \n <|im_start|> assistant\n"
    for options in ((True, False), (False, False), (False, True)):
        whole = tokenizer.decode(ids[3:], *options)
        out = OutputText(tokenizer, (), ids[:3], *options)
        assert "".join(out.push([t], final=i == len(ids) - 4).text for i, t in enumerate(ids[3:])) == whole


def test_a_folder_with_only_tokenizer_model_is_refused_naming_tokenizer_json(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"\x00")
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
