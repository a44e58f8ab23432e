"""Streamed text deltas join to exactly the text of the whole output, however the ids are chunked."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.common.tokenizer import ByteTokenizer, IncrementalDecoder, load_tokenizer


def _stream(tokenizer, ids: list[int], cuts: list[int]) -> str:
    decoder = IncrementalDecoder(tokenizer)
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return "".join(decoder.push(ids[a:b], final=b == len(ids)) for a, b in zip(bounds, bounds[1:]))


@given(st.lists(st.integers(0, 258), min_size=1, max_size=80), st.lists(st.integers(0, 200), max_size=20))
def test_byte_tokenizer_deltas_join_to_the_whole_text(ids: list[int], cuts: list[int]) -> None:
    tokenizer = ByteTokenizer()
    assert _stream(tokenizer, ids, cuts) == tokenizer.decode(ids)


def test_tokenizer_json_deltas_join_to_the_whole_text(tiny_llama_dir: str) -> None:
    tokenizer = load_tokenizer(tiny_llama_dir)
    ids = tokenizer.encode("héllo wörld ✓ — streamed ") + list(range(3, 259, 7))
    for cuts in ([1, 2, 3], [5, 9, 40], list(range(0, 200, 3))):
        assert _stream(tokenizer, ids, cuts) == tokenizer.decode(ids)
