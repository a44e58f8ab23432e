"""Completion logprobs line up with the text they are returned with: each token's text_offset is where its first
character is (the echoed prompt and the output alike), for byte-level BPE, SentencePiece and byte tokenizers,
with leading spaces and multi-byte characters, whether the prompt came as text or as ids."""

from __future__ import annotations

import pytest

from services.common.errors import EngineInputError
from services.common.model_config import ModelConfig
from services.common.sampling import TokenLogprobs
from services.common.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer
from services.engine.make_model import write_tokenizer
from services.engine.preset_configs import BYTE_VOCAB, PRESETS
from services.router.openai_logprobs import completion_logprobs, echo_of
from services.router.openai_models import DetokenizeBody, TokenizeBody
from services.router.output_text import OutputText
from services.router.request import RequestBuilder
from services.router.tokenization import detokenize, tokenize
from tests.spiece import VOCAB_SIZE, write_spiece_tokenizer

TEXTS = ["the sky is blue", "  two leading spaces", " one", "café au lait é€", "naïve🙂 x", "a\nb\tc ?"]


@pytest.fixture(scope="module", params=["byte-level", "sentencepiece", "bytes"])
def tokenizer(request, tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    if request.param == "bytes":
        return ByteTokenizer()
    folder = tmp_path_factory.mktemp(request.param)
    write = write_tokenizer if request.param == "byte-level" else write_spiece_tokenizer
    write(folder, BYTE_VOCAB if request.param == "byte-level" else VOCAB_SIZE)
    return load_tokenizer(folder)


def _assert_at_first_characters(text: str, ids: list[int], starts: list[int], tokenizer: Tokenizer) -> None:
    """Offsets rise, and the tokens that share one decode to the text from there to the next one's: the bytes of
    'é' all point at it (spaces aside: a SentencePiece word's own is dropped when it decodes first)."""
    assert len(starts) == len(ids) and starts == sorted(starts)
    bounds = sorted(set(starts)) + [len(text)]
    for lo, hi in zip(bounds, bounds[1:]):
        group = [t for t, s in zip(ids, starts) if s == lo]
        assert tokenizer.decode(group).strip(" ") == text[lo:hi].strip(" "), (group, text[lo:hi])


@pytest.mark.parametrize("text", TEXTS)
def test_an_echoed_prompt_has_each_tokens_first_character_as_offset(tokenizer: Tokenizer, text: str) -> None:
    echo = echo_of(tokenizer, text)
    assert echo.text == text and echo.ids == tokenizer.encode(text)
    _assert_at_first_characters(text, echo.ids, echo.starts, tokenizer)
    by_ids = echo_of(tokenizer, echo.ids)  # found by decoding, not from the encoding: the same offsets
    assert (by_ids.text, by_ids.starts) == (text, echo.starts)


@pytest.mark.parametrize("prompt, output", [("Answer:", " yes it is"), ("naïve", "🙂 café é"), ("x", "  lead")])
def test_output_offsets_continue_the_prompt_in_any_chunking(tokenizer: Tokenizer, prompt: str, output: str) -> None:
    """The output decodes after the prompt's last ids, so a SentencePiece word keeps its leading space."""
    ids, starts = tokenizer.encode_with_starts(prompt + output)
    cut = len(tokenizer.encode(prompt))
    for step in (1, 2, 5):
        text = OutputText(tokenizer, prompt_ids=ids[:cut])
        deltas = [text.push(ids[i : i + step], final=i + step >= len(ids)) for i in range(cut, len(ids), step)]
        assert "".join(d.text for d in deltas) == output
        assert [s for d in deltas for s in d.starts] == [s - len(prompt) for s in starts[cut:]]


def test_completion_logprobs_begin_with_the_prompt_and_a_null() -> None:
    tokenizer = ByteTokenizer()
    echo = echo_of(tokenizer, "é!")
    prompt = [TokenLogprobs(t, -1.0, [(t, -1.0)]) for t in echo.ids[1:]]
    out = completion_logprobs(tokenizer, [TokenLogprobs(2, -0.5, [(2, -0.5)])], [len(echo.text)], echo, prompt)
    assert out == {"tokens": ["<s>", "\ufffd", "\ufffd", "!", "</s>"], "token_logprobs": [None, -1.0, -1.0, -1.0, -0.5],
                   "top_logprobs": [None, {"\ufffd": -1.0}, {"\ufffd": -1.0}, {"!": -1.0}, {"</s>": -0.5}],
                   "text_offset": [0, 0, 0, 1, 2]}


def test_tokenize_and_detokenize_take_vllms_shapes(tokenizer: Tokenizer) -> None:
    config = ModelConfig.from_dict({**PRESETS["tiny-llama"], "vocab_size": VOCAB_SIZE})
    builder = RequestBuilder(config, tokenizer, "tiny", 1000)
    ids = tokenizer.encode("naïve sky")
    got = tokenize(builder, TokenizeBody(prompt="naïve sky", return_token_strs=True))
    assert got == {"count": len(ids), "max_model_len": 2048, "tokens": ids,
                   "token_strs": [tokenizer.token_text(t) for t in ids]}
    assert tokenize(builder, TokenizeBody(prompt="sky", add_special_tokens=False))["tokens"] == tokenizer.encode("sky")[1:]
    chat = tokenize(builder, TokenizeBody(messages=[{"role": "user", "content": "hi"}]))
    assert chat["tokens"] == tokenizer.encode("user: hi\nassistant:")
    text = detokenize(builder, DetokenizeBody(tokens=ids))["prompt"]  # specials written out; Llama 2's: "<s> naïve"
    assert text.startswith("<s>") and text.endswith("naïve sky") and detokenize(builder, DetokenizeBody(tokens=ids[1:])) \
        == {"prompt": "naïve sky"}
    for body, field in ((TokenizeBody(), "prompt"), (TokenizeBody(prompt="a", messages=[{"role": "user", "content": "b"}]), "prompt"),
                        (TokenizeBody(prompt="a", model="other"), "model"), (TokenizeBody(prompt="x" * 1001), "prompt"),
                        (DetokenizeBody(tokens=[1, VOCAB_SIZE]), "tokens"), (DetokenizeBody(tokens=[-1]), "tokens")):
        with pytest.raises(EngineInputError) as bad:
            (tokenize if isinstance(body, TokenizeBody) else detokenize)(builder, body)
        assert bad.value.field == field
