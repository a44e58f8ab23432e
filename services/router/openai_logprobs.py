"""Token logprobs in the OpenAI shapes: completions' (tokens, token_logprobs, top_logprobs, text_offset) and
chat's (content: token, logprob, bytes, top_logprobs); and the echoed prompt they begin with.

`text_offset` is where each token's first character is in the choice's text, found where the text is made (the
prompt's encoding, the output's incremental decoding), not by adding up the tokens' lengths: a token alone may
not decode to its part of the text (a byte of a multi-byte character, a SentencePiece word at the start).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.sampling import TokenLogprobs
from services.common.tokenizer import Tokenizer
from services.router.output_text import OutputText


@dataclass(frozen=True, slots=True)
class Echo:
    """A completion's prompt written before its choices' text: the text, its ids, each id's first character."""

    text: str
    ids: list[int]
    starts: list[int]


def echo_of(tokenizer: Tokenizer, prompt: str | list[int]) -> Echo:
    """A text prompt is echoed as given; one of ids as they decode."""
    if isinstance(prompt, str):
        return Echo(prompt, *tokenizer.encode_with_starts(prompt))
    text = OutputText(tokenizer).push(list(prompt), final=True)
    return Echo(text.text, list(prompt), text.starts)


def completion_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs], starts: list[int], echo: Echo | None = None,
                        echo_items: list[TokenLogprobs] | None = None) -> dict:
    """`starts`: each item's token's first character in the choice's text. `echo`: the prompt's tokens come first,
    token 0 with null logprobs (nothing predicts it), then `echo_items` (tokens 1..)."""
    entries: list[TokenLogprobs | None] = [None, *(echo_items or [])] if echo else []
    entries += items
    ids = (echo.ids if echo else []) + [t.token_id for t in items]
    return {"tokens": [tokenizer.token_text(t) for t in ids],
            "token_logprobs": [None if t is None else t.logprob for t in entries],
            "top_logprobs": [None if t is None else {tokenizer.token_text(i): v for i, v in t.top} for t in entries],
            "text_offset": (echo.starts if echo else []) + starts}


def chat_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs]) -> dict:
    def entry(token_id: int, logprob: float) -> dict:
        token = tokenizer.token_text(token_id)
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**entry(t.token_id, t.logprob), "top_logprobs": [entry(i, v) for i, v in t.top]}
                        for t in items]}
