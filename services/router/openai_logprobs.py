"""Token logprobs in the OpenAI shapes: completions' (tokens, token_logprobs, top_logprobs, text_offset) and
chat's (content: token, logprob, bytes, top_logprobs)."""

from __future__ import annotations

from services.common.sampling import TokenLogprobs
from services.common.tokenizer import Tokenizer


def completion_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs], text_offset: int,
                        first_prompt_token: int | None = None) -> dict:
    """`text_offset`: where the first token's text starts in the choice's text. `first_prompt_token` (echo): the
    items begin with the prompt's tokens 1..; its token 0 comes first, with null logprobs (nothing predicts it)."""
    lead = [] if first_prompt_token is None else [None]
    tokens = [tokenizer.decode([t]) for t in ([first_prompt_token] if lead else []) + [t.token_id for t in items]]
    offsets = []
    for token in tokens:
        offsets.append(text_offset)
        text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": lead + [t.logprob for t in items],
            "top_logprobs": lead + [{tokenizer.decode([i]): v for i, v in t.top} for t in items], "text_offset": offsets}


def chat_logprobs(tokenizer: Tokenizer, items: list[TokenLogprobs]) -> dict:
    def entry(token_id: int, logprob: float) -> dict:
        token = tokenizer.decode([token_id])
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**entry(t.token_id, t.logprob), "top_logprobs": [entry(i, v) for i, v in t.top]}
                        for t in items]}
