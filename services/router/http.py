"""OpenAI-compatible HTTP front end (/v1/completions, /v1/chat/completions, /v1/models, /health) over RouterCore."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from services.common.errors import EngineInputError, status_of
from services.common.sampling import SamplingParams
from services.common.tokenizer import Tokenizer
from services.router.core import Chunk, RouterCore
from services.router.openai_logprobs import chat_logprobs, completion_logprobs
from services.router.openai_models import UNSUPPORTED, ChatBody, CompletionBody, chat_prompt
from services.router.request import RequestBuilder, RouterRequest


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def _status_of(exc: Exception) -> JSONResponse:
    status = status_of(exc)
    if status is None:
        return _error(500, f"{type(exc).__name__}: {exc}", "internal_error")
    return _error(status.http.status, status.message, status.http.kind, status.field)


@dataclass(frozen=True, slots=True)
class Shape:
    """How one request's answer is written."""

    chat: bool
    model: str
    tokenizer: Tokenizer
    logprobs: bool
    echo: str = ""  # completions with echo: the prompt's text, before each choice's text

    def choice(self, chunks: list[Chunk], index: int, delta: bool, offset: int = 0) -> dict:
        text = "".join(c.text for c in chunks)
        reason = next((c.finish_reason for c in chunks if c.finish_reason), None)
        items = [lp for c in chunks for lp in c.logprobs]
        if not self.chat:
            logprobs = completion_logprobs(self.tokenizer, items, offset) if self.logprobs else None
            return {"index": index, "text": text, "finish_reason": reason, "logprobs": logprobs}
        out = {"index": index, "delta" if delta else "message": {"role": "assistant", "content": text},
               "finish_reason": reason}
        if self.logprobs:
            out["logprobs"] = chat_logprobs(self.tokenizer, items)
        return out


def _params(body: CompletionBody | ChatBody, max_tokens: int | None, default_max_tokens: int) -> SamplingParams:
    if body.best_of is not None and body.best_of != body.n:
        raise EngineInputError("best_of", "must equal n (ranking samples by logprob is not supported)")
    if isinstance(body, ChatBody):
        if body.top_logprobs is not None and not body.logprobs:
            raise EngineInputError("top_logprobs", "needs logprobs: true")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
    else:
        if body.echo and body.logprobs is not None:
            raise EngineInputError("echo", "echo with logprobs (prompt logprobs) is not supported")
        logprobs = body.logprobs
    return SamplingParams(max_tokens=default_max_tokens if max_tokens is None else max_tokens,
                          temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
                          stop_token_ids=tuple(body.stop_token_ids), ignore_eos=body.ignore_eos,
                          stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()), logprobs=logprobs,
                          presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
                          repetition_penalty=body.repetition_penalty, min_tokens=body.min_tokens,
                          logit_bias=tuple(sorted((body.logit_bias or {}).items())))


def build_app(core: RouterCore, builder: RequestBuilder, default_max_tokens: int, api_key: str = "") -> FastAPI:
    app = FastAPI(title="distserve router", description="OpenAI-compatible API of distserve")

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"] if p != "body")
        if first["type"] == "extra_forbidden":
            why = "is not supported" if field in UNSUPPORTED else "is not a known field"
            return _error(400, f"{field} {why}", "invalid_request_error", field)
        return _error(400, f"{field}: {first['msg']}", "invalid_request_error", field)

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/") and request.headers.get("authorization") != f"Bearer {api_key}":
            return _error(401, "missing or wrong API key", "authentication_error")
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": builder.model_name, "object": "model", "created": 0, "owned_by": "distserve"}]}

    async def run(body: CompletionBody | ChatBody, prompt: str | list[int], max_tokens: int | None, chat: bool):
        try:
            params = _params(body, max_tokens, default_max_tokens)
            text, ids = (prompt, []) if isinstance(prompt, str) else ("", prompt)
            if isinstance(prompt, str) and not prompt:
                raise EngineInputError("prompt", "must not be empty")
            req = builder.build(prompt=text, prompt_ids=ids, params=params, model=body.model, n=body.n)
            stream = core.generate(req)
            first = await anext(stream)  # admission and validation errors surface before any byte is sent
        except Exception as exc:
            return _status_of(exc)
        echo = "" if chat or not getattr(body, "echo", False) else (text or builder.tokenizer.decode(ids))
        shape = Shape(chat, builder.model_name, builder.tokenizer, params.logprobs is not None, echo)
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(_sse(req, first, stream, shape, usage), media_type="text/event-stream")
        chunks = [first] + [c async for c in stream]
        return _final(req, chunks, shape)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody):
        return await run(body, body.prompt, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody):
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        return await run(body, chat_prompt(body.messages), max_tokens, chat=True)

    return app


def _usage(req: RouterRequest, completion: int) -> dict:
    prompt = len(req.prompt_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _final(req: RouterRequest, chunks: list[Chunk], shape: Shape) -> dict:
    choices = []
    for index in range(req.n):
        mine = [c for c in chunks if c.index == index]
        choice = shape.choice(mine, index, delta=False, offset=len(shape.echo))
        if shape.echo:
            choice["text"] = shape.echo + choice["text"]
        choice["token_ids"] = [t for c in mine for t in c.token_ids]
        choices.append(choice)
    return {
        "id": f"{'chatcmpl' if shape.chat else 'cmpl'}-{req.request_id}",
        "object": "chat.completion" if shape.chat else "text_completion",
        "created": int(time.time()), "model": shape.model, "choices": choices,
        "usage": _usage(req, sum(len(c.token_ids) for c in chunks)),
        "token_ids": choices[0]["token_ids"],
    }


async def _sse(req: RouterRequest, first: Chunk, rest: AsyncIterator[Chunk], shape: Shape, usage: bool) -> AsyncIterator[str]:
    kind = "chat.completion.chunk" if shape.chat else "text_completion"
    created = int(time.time())
    offsets = [len(shape.echo)] * req.n  # each choice's text so far (for completions' text_offset)
    completion = 0

    def event(choices: list[dict], **extra) -> str:
        body = {"id": f"{'chatcmpl' if shape.chat else 'cmpl'}-{req.request_id}", "object": kind, "created": created,
                "model": shape.model, "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n"

    if shape.echo:
        for index in range(req.n):
            yield event([{"index": index, "text": shape.echo, "finish_reason": None, "logprobs": None}])
    async for chunk in _prepend(first, rest):
        choice = shape.choice([chunk], chunk.index, delta=True, offset=offsets[chunk.index])
        offsets[chunk.index] += len(chunk.text)
        completion += len(chunk.token_ids)
        yield event([choice], token_ids=chunk.token_ids, **({"usage": None} if usage else {}))
    if usage:
        yield event([], usage=_usage(req, completion))
    yield "data: [DONE]\n\n"


async def _prepend(first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    yield first
    async for chunk in rest:
        yield chunk
