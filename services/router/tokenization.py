"""vLLM's /tokenize and /detokenize, which evaluation harnesses probe to count and map a model's tokens."""

from __future__ import annotations

from services.common.errors import EngineInputError
from services.router.openai_models import DetokenizeBody, TokenizeBody
from services.router.request import RequestBuilder


def tokenize(builder: RequestBuilder, body: TokenizeBody) -> dict:
    """{"count", "max_model_len", "tokens", "token_strs"}: the ids a completion (or, of messages, a chat
    completion) would be given; `add_special_tokens` set: the tokenizer's special tokens added or not."""
    builder.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise EngineInputError("prompt", "give prompt or messages (one of them)")
    if body.messages is None:
        builder.check_text(body.prompt or "")
        ids = builder.tokenizer.encode(body.prompt or "", add_special_tokens=body.add_special_tokens is not False)
    elif body.add_special_tokens is None:
        ids = builder.chat_prompt(**body.template_args(body.messages))
    else:
        text = builder.chat.render(**body.template_args(body.messages))
        builder.check_text(text, "messages")
        ids = builder.tokenizer.encode(text, add_special_tokens=body.add_special_tokens)
    strs = [builder.tokenizer.token_text(t) for t in ids] if body.return_token_strs else None
    return {"count": len(ids), "max_model_len": builder.config.max_position, "tokens": ids, "token_strs": strs}


def detokenize(builder: RequestBuilder, body: DetokenizeBody) -> dict:
    """{"prompt"}: the text of the ids, special tokens written out (as vLLM does)."""
    builder.check_model(body.model)
    vocab = builder.config.vocab_size
    if any(not 0 <= t < vocab for t in body.tokens):
        raise EngineInputError("tokens", f"ids must be integers in [0, {vocab})")
    return {"prompt": builder.tokenizer.decode(body.tokens, skip_special_tokens=False)}
