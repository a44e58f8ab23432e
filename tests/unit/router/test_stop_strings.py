"""Stop strings: any chunking of one token stream gives the same text and finish; the stop string is never
returned; a stream holds back only text that may begin a stop string."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.tokenizer import ByteTokenizer
from services.router.output_text import OutputText

TOKENIZER = ByteTokenizer()
ALPHABET = "ab\n é€"  # multi-byte characters: some tokens end inside a character
texts = st.text(alphabet=ALPHABET, min_size=0, max_size=40)
stops = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=6), min_size=0, max_size=4)


def _run(ids: list[int], stop: list[str], cuts: list[int]) -> tuple[str, bool, list[str], int]:
    """Pushes `ids` in the chunks `cuts` makes; returns the text, whether a stop string ended it, the deltas, and
    the tokens taken."""
    out = OutputText(TOKENIZER, tuple(stop))
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    deltas, taken = [], 0
    for lo, hi in zip(bounds, bounds[1:]):
        delta = out.push(ids[lo:hi], final=hi == len(ids))
        deltas.append(delta.text)
        taken += len(delta.token_ids)
        if delta.stopped:
            return "".join(deltas), True, deltas, taken
    return "".join(deltas), False, deltas, taken


@settings(max_examples=400, deadline=None)
@given(text=texts, stop=stops, cuts=st.lists(st.integers(0, 200), max_size=12))
def test_any_chunking_gives_the_same_text_and_finish(text: str, stop: list[str], cuts: list[int]) -> None:
    ids = TOKENIZER.encode(text)[1:]
    one_by_one = _run(ids, stop, list(range(len(ids))))
    chunked = _run(ids, stop, cuts)
    assert chunked[:2] == one_by_one[:2] and chunked[3] == one_by_one[3]
    got, stopped = chunked[:2]
    assert not any(s in got for s in stop)
    if stopped:
        assert any(text.startswith(got + s) for s in stop)
    else:
        assert got == text


@settings(max_examples=200, deadline=None)
@given(text=texts, stop=stops)
def test_a_stream_holds_back_only_what_may_begin_a_stop_string(text: str, stop: list[str]) -> None:
    ids = TOKENIZER.encode(text)[1:]
    out = OutputText(TOKENIZER, tuple(stop))
    sent = ""
    for i in range(len(ids)):
        delta = out.push(ids[i : i + 1])
        sent += delta.text
        if delta.stopped:
            return
        so_far = TOKENIZER.decode(ids[: i + 1]).rstrip("\ufffd")  # an unfinished character is held by the decoder
        held = so_far[len(sent) :]
        assert so_far.startswith(sent)
        assert held == "" or any(s.startswith(held) for s in stop)


def test_a_stop_string_across_tokens_ends_the_text() -> None:
    ids = TOKENIZER.encode("hello world. more")[1:]
    out = OutputText(TOKENIZER, ("world.", "xyz"))
    deltas = []
    for i in range(0, len(ids), 3):
        deltas.append(out.push(ids[i : i + 3]))
        if deltas[-1].stopped:
            break
    assert [d.text for d in deltas] == ["hel", "lo ", "", ""]  # "wor" and "ld." may begin the stop string
    assert deltas[-1].stopped and sum(len(d.token_ids) for d in deltas) == len("hello world.")
