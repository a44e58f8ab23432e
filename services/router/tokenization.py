"""vLLM's /tokenize and /detokenize, which evaluation harnesses probe to count and map a model's tokens."""

from __future__ import annotations

from services.common.errors import EngineInputError
from services.router.openai_models import DetokenizeBody, TokenizeBody, chat_prompt
from services.router.request import RequestBuilder


def tokenize(builder: RequestBuilder, body: TokenizeBody) -> dict:
    """{"count", "max_model_len", "tokens", "token_strs"}: the ids a completion of that prompt would be given
    (the chat template here has no BOS of its own: add_special_tokens adds it, as chat completions do)."""
    builder.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise EngineInputError("prompt", "give prompt or messages (one of them)")
    if body.messages is None:
        text, name = body.prompt or "", "prompt"
    else:
        text, name = chat_prompt(body.messages, body.add_generation_prompt), "messages"
    builder.check_text(text, name)
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
