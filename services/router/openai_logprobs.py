"""Token logprobs in the OpenAI shapes: completions' (tokens, token_logprobs, top_logprobs, text_offset) and
chat's (content: token, logprob, bytes, top_logprobs)."""

from __future__ import annotations

from services.common.sampling import TokenLogprobs
from services.common.tokenizer import Tokenizer


def completion_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs], text_offset: int) -> dict:
    """`text_offset`: where the first token's text starts in the choice's text."""
    tokens = [tokenizer.decode([t.token_id]) for t in items]
    offsets = []
    for token in tokens:
        offsets.append(text_offset)
        text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": [t.logprob for t in items],
            "top_logprobs": [{tokenizer.decode([i]): v for i, v in t.top} for t in items], "text_offset": offsets}


def chat_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs]) -> dict:
    def entry(token_id: int, logprob: float) -> dict:
        token = tokenizer.decode([token_id])
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**entry(t.token_id, t.logprob), "top_logprobs": [entry(i, v) for i, v in t.top]}
                        for t in items]}
