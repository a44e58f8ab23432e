"""OpenAI-compatible HTTP front end (/v1/completions, /v1/chat/completions, /v1/models, /health) over RouterCore."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.common.api_keys import ApiKeys
from services.common.errors import EngineInputError, Status, internal_status, status_of
from services.common.front_door import BodyLimit
from services.common.sampling import SamplingParams
from services.router.closing_response import ClosingStreamingResponse
from services.router.core import Chunk, RouterCore
from services.router.openai_models import (
    ChatBody,
    CompletionBody,
    SamplingBody,
    chat_prompt,
)
from services.router.request import RequestBuilder, RouterRequest
from services.router.slo import requested_slo

log = logging.getLogger(__name__)


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def _client_status(exc: Exception) -> Status:
    status = status_of(exc)
    if status is None:
        log.error("unexpected error", exc_info=exc)
        return internal_status(exc)
    return status


def _status_of(exc: Exception) -> JSONResponse:
    status = _client_status(exc)
    response = _error(status.http.status, status.message, status.http.kind, status.field)
    if status.retry_after_s is not None:
        response.headers["Retry-After"] = str(math.ceil(status.retry_after_s))
    return response


def _params(body: SamplingBody, max_tokens: int | None, default_max_tokens: int) -> SamplingParams:
    if body.n != 1:
        raise EngineInputError("n", "only n=1 is supported")
    if body.stop:
        raise EngineInputError("stop", "stop strings are not supported; use stop_token_ids")
    if body.logprobs:
        raise EngineInputError("logprobs", "logprobs are not supported")
    return SamplingParams(max_tokens=default_max_tokens if max_tokens is None else max_tokens,
                          temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
                          stop_token_ids=tuple(body.stop_token_ids), ignore_eos=body.ignore_eos)


def build_app(core: RouterCore, builder: RequestBuilder, default_max_tokens: int, keys: ApiKeys | None = None,
              missing: Callable[[], list[str]] = list, max_body_bytes: int = 4 << 20) -> FastAPI:
    app = FastAPI(title="distserve router", description="OpenAI-compatible API of distserve")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    keys = keys or ApiKeys()

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"] if p != "body")
        return _error(400, f"{field}: {first['msg']}", "invalid_request_error", field)

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        if request.url.path.startswith("/v1/") and not keys.allows_bearer(request.headers.get("authorization")):
            return _error(401, "missing or wrong API key", "authentication_error")
        return await call_next(request)

    @app.get("/health")
    async def health():
        roles = missing()  # no live instance of a role the router needs: it cannot serve
        if roles:
            return JSONResponse({"status": "unavailable", "missing": roles}, status_code=503, headers={"Retry-After": "1"})
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": builder.model_name, "object": "model", "created": 0, "owned_by": "distserve"}]}

    async def run(body: SamplingBody, prompt: str | list[int], max_tokens: int | None, chat: bool,
                  headers: Mapping[str, str]):
        try:
            params = _params(body, max_tokens, default_max_tokens)
            text, ids = (prompt, []) if isinstance(prompt, str) else ("", prompt)
            if isinstance(prompt, str) and not prompt:
                raise EngineInputError("prompt", "must not be empty")
            req = builder.build(prompt=text, prompt_ids=ids, params=params, model=body.model)
            req.slo = requested_slo(headers)
            stream = core.generate(req)
            first = await anext(stream)  # admission and validation errors surface before any byte is sent
        except Exception as exc:
            return _status_of(exc)
        if body.stream:
            return ClosingStreamingResponse(_sse(req, first, stream, chat, builder.model_name), media_type="text/event-stream")
        try:
            async with aclosing(stream):
                chunks = [first] + [c async for c in stream]
        except Exception as exc:
            return _status_of(exc)
        return _final(req, chunks, chat, builder.model_name)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, request: Request):
        return await run(body, body.prompt, body.max_tokens, chat=False, headers=request.headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, request: Request):
        return await run(body, chat_prompt(body.messages), body.max_completion_tokens or body.max_tokens, chat=True,
                         headers=request.headers)

    return app


def _choice(text: str, reason: str | None, chat: bool, delta: bool) -> dict:
    if not chat:
        return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    key = "delta" if delta else "message"
    return {"index": 0, key: {"role": "assistant", "content": text}, "finish_reason": reason}


def _final(req: RouterRequest, chunks: list[Chunk], chat: bool, model: str) -> dict:
    text = "".join(c.text for c in chunks)
    n = sum(len(c.token_ids) for c in chunks)
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{req.request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()), "model": model,
        "choices": [_choice(text, chunks[-1].finish_reason or None, chat, delta=False)],
        "usage": {"prompt_tokens": len(req.prompt_ids), "completion_tokens": n, "total_tokens": len(req.prompt_ids) + n},
        "token_ids": [t for c in chunks for t in c.token_ids],
    }


async def _sse(req: RouterRequest, first: Chunk, rest: AsyncIterator[Chunk], chat: bool, model: str) -> AsyncIterator[str]:
    kind = "chat.completion.chunk" if chat else "text_completion"
    created = int(time.time())

    def event(chunk: Chunk) -> str:
        body = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{req.request_id}", "object": kind, "created": created,
                "model": model, "choices": [_choice(chunk.text, chunk.finish_reason or None, chat, delta=True)],
                "token_ids": chunk.token_ids}
        return f"data: {json.dumps(body)}\n\n"

    async with aclosing(rest):  # a client gone mid-stream closes the request at once
        yield event(first)
        try:
            async for chunk in rest:
                yield event(chunk)
        except Exception as exc:  # the status is already sent: the failure goes in an error event
            status = _client_status(exc)
            error = {"message": status.message, "type": status.http.kind, "param": status.field,
                     "code": status.http.status}
            yield f"data: {json.dumps({'error': error})}\n\n"
        yield "data: [DONE]\n\n"
