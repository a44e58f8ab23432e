"""OpenAI-compatible HTTP front end (/v1/completions, /v1/chat/completions, /v1/models, /health) over RouterCore,
and vLLM's /tokenize and /detokenize."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.common.api_keys import ApiKeys
from services.common.errors import EngineInputError, Status, internal_status, status_of
from services.common.front_door import BodyLimit
from services.common.generation_config import SamplingDefaults
from services.common.sampling import SamplingParams
from services.common.tokenizer import Tokenizer
from services.router.chat_output import ChatOutput, ChatParsers
from services.router.choices import merge
from services.router.closing_response import ClosingStreamingResponse
from services.router.core import Chunk, RouterCore
from services.router.openai_logprobs import Echo, chat_logprobs, completion_logprobs, echo_of
from services.router.openai_models import UNSUPPORTED, ChatBody, CompletionBody, DetokenizeBody, TokenizeBody
from services.router.request import RequestBuilder, RouterRequest
from services.router.slo import requested_slo
from services.router.structured import request_grammar
from services.router.tokenization import detokenize, tokenize
from services.router.tool_parsers import ToolParser

KEYED_PATHS = ("/tokenize", "/detokenize")  # besides /v1/...: what only callers with a key may use

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


@dataclass(frozen=True, slots=True)
class Shape:
    """How one request's answer is written."""

    chat: bool
    model: str
    tokenizer: Tokenizer
    logprobs: bool
    echo: tuple[Echo, ...] = ()  # completions with echo: one per prompt
    reasoning: bool = False  # chat: split <think>...</think> off as reasoning_content
    tools: ToolParser | None = None  # chat: tool calls are parsed out of the text with it
    outputs: dict[int, ChatOutput] = field(default_factory=dict)  # chat: each choice's text so far

    def choice(self, chunks: list[Chunk], index: int, delta: bool, echo: Echo | None = None, first: bool = True) -> dict:
        """`echo`: the choice's prompt, written first (with its logprobs, when asked) when the chunks are `first`."""
        text = "".join(c.text for c in chunks)
        reason = next((c.finish_reason for c in chunks if c.finish_reason), None)
        items = [lp for c in chunks for lp in c.logprobs]
        if not self.chat:
            prompt = echo if echo and first else None
            logprobs = None
            if self.logprobs:
                base = len(echo.text) if echo else 0  # the output's offsets count from the end of the echo
                logprobs = completion_logprobs(self.tokenizer, items, [base + s for c in chunks for s in c.starts],
                                               prompt, [lp for c in chunks for lp in c.prompt_logprobs])
            return {"index": index, "text": (prompt.text if prompt else "") + text, "finish_reason": reason,
                    "logprobs": logprobs}
        output = self.outputs.setdefault(index, ChatOutput(self.reasoning, self.tools))
        body, reason = output.choice_body(text, reason, stream=delta)
        out = {"index": index, "delta" if delta else "message": body, "finish_reason": reason}
        if self.logprobs:
            out["logprobs"] = chat_logprobs(self.tokenizer, items)
        return out


def _params(body: CompletionBody | ChatBody, max_tokens: int | None, default_max_tokens: int,
            defaults: SamplingDefaults, parsers: ChatParsers) -> SamplingParams:
    if body.best_of is not None and body.best_of < body.n:
        raise EngineInputError("best_of", f"must be >= n ({body.n})")
    if _samples(body) > body.n and body.stream:
        raise EngineInputError("best_of", "best_of > n cannot stream (the best are known at the end)")
    if isinstance(body, ChatBody):
        if body.top_logprobs is not None and not body.logprobs:
            raise EngineInputError("top_logprobs", "needs logprobs: true")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        prompt_logprobs = None
    else:
        logprobs = body.logprobs
        prompt_logprobs = logprobs if body.echo else None
    if _samples(body) > body.n and logprobs is None:
        logprobs = 0  # ranking needs each token's logprob; not returned
    return SamplingParams(max_tokens=default_max_tokens if max_tokens is None else max_tokens, seed=body.seed,
                          stop_token_ids=tuple(body.stop_token_ids), ignore_eos=body.ignore_eos,
                          stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()), logprobs=logprobs,
                          presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
                          min_tokens=body.min_tokens, skip_special_tokens=body.skip_special_tokens,
                          spaces_between_special_tokens=body.spaces_between_special_tokens, **body.sampling(defaults),
                          logit_bias=tuple(sorted((body.logit_bias or {}).items())), prompt_logprobs=prompt_logprobs,
                          grammar=request_grammar(body, parsers))


def _samples(body: CompletionBody | ChatBody) -> int:
    """Choices generated per prompt: best_of (vLLM: the n with the highest cumulative logprob are returned)."""
    return body.best_of or body.n


def _asked_logprobs(body: CompletionBody | ChatBody) -> bool:
    return bool(body.logprobs) if isinstance(body, ChatBody) else body.logprobs is not None


def _best(chunks: list[Chunk], prompts: int, best_of: int, n: int) -> list[Chunk]:
    """Each prompt's n choices of highest cumulative logprob, renumbered i * n + j in that order."""
    score = {i: 0.0 for i in range(prompts * best_of)}
    for c in chunks:
        score[c.index] += sum(lp.logprob for lp in c.logprobs)
    index = {}
    for p in range(prompts):
        ranked = sorted(range(p * best_of, (p + 1) * best_of), key=lambda i: -score[i])
        index.update({old: p * n + j for j, old in enumerate(ranked[:n])})
    return [replace(c, index=index[c.index]) for c in chunks if c.index in index]


def build_app(core: RouterCore, builder: RequestBuilder, default_max_tokens: int, keys: ApiKeys | None = None,
              missing: Callable[[], list[str]] = list, max_body_bytes: int = 4 << 20,
              parsers: ChatParsers | None = None) -> FastAPI:
    app = FastAPI(title="distserve router", description="OpenAI-compatible API of distserve")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    keys = keys or ApiKeys()
    parsers = parsers or ChatParsers()

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
        path = request.url.path
        if (path.startswith("/v1/") or path in KEYED_PATHS) and not keys.allows_bearer(request.headers.get("authorization")):
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
        return {"object": "list", "data": [{"id": builder.model_name, "object": "model", "created": 0, "owned_by": "distserve",
                                            "max_model_len": builder.config.max_position}]}

    @app.post("/tokenize")
    async def tokenize_route(body: TokenizeBody):
        try:
            return tokenize(builder, body)
        except EngineInputError as exc:
            return _status_of(exc)

    @app.post("/detokenize")
    async def detokenize_route(body: DetokenizeBody):
        try:
            return detokenize(builder, body)
        except EngineInputError as exc:
            return _status_of(exc)

    async def run(body: CompletionBody | ChatBody, prompts: list[str | list[int]], max_tokens: int | None, chat: bool,
                  headers: Mapping[str, str]):
        streams: list[AsyncIterator[Chunk]] = []
        try:
            params = _params(body, max_tokens, default_max_tokens, builder.sampling, parsers)
            if not prompts or any(not p for p in prompts):
                raise EngineInputError("prompt", "must not be empty")
            reqs = [builder.build(prompt=p if isinstance(p, str) else "", prompt_ids=[] if isinstance(p, str) else p,
                                  params=replace(params), model=body.model, n=_samples(body),
                                  tenant=keys.tenant(headers.get("authorization")), cache_salt=body.cache_salt)
                    for p in prompts]
            for req in reqs:
                req.slo = requested_slo(headers)
            streams = [core.generate(req) for req in reqs]
            # admission and validation errors surface before any byte is sent
            firsts = await asyncio.gather(*(anext(s) for s in streams), return_exceptions=True)
            failed = next((f for f in firsts if isinstance(f, BaseException)), None)
            if failed is not None:
                raise failed
        except Exception as exc:
            for stream in streams:
                await stream.aclose()
            return _status_of(exc)
        echo = () if chat or not getattr(body, "echo", False) else tuple(echo_of(builder.tokenizer, p) for p in prompts)
        tools = parsers.tools if chat and body.tools and body.tool_choice != "none" else None
        shape = Shape(chat, builder.model_name, builder.tokenizer, _asked_logprobs(body), echo, parsers.reasoning, tools)
        chunks = merge([_numbered(i * _samples(body), first, s) for i, (first, s) in enumerate(zip(firsts, streams))])
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return ClosingStreamingResponse(_sse(Batch(reqs, body.n, builder.report_cached_tokens), chunks, shape, usage),
                                            media_type="text/event-stream")
        try:
            async with aclosing(chunks):
                collected = [c async for c in chunks]
        except Exception as exc:
            return _status_of(exc)
        if _samples(body) > body.n:
            collected = _best(collected, len(reqs), _samples(body), body.n)
        return _final(Batch(reqs, body.n, builder.report_cached_tokens), collected, shape)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, request: Request):
        prompts = body.prompt if isinstance(body.prompt, list) and body.prompt and not isinstance(body.prompt[0], int) \
            else [body.prompt]
        return await run(body, prompts, body.max_tokens, chat=False, headers=request.headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, request: Request):
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        try:
            builder.check_model(body.model)
            tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
            prompt = builder.chat_prompt(**body.template_args(body.messages), tools=tools)
        except EngineInputError as exc:
            return _status_of(exc)
        return await run(body, [prompt], max_tokens, chat=True, headers=request.headers)

    return app


@dataclass(frozen=True, slots=True)
class Batch:
    """The requests of one call (one per prompt), each with n choices: choice i * n + j is request i's j-th."""

    reqs: list[RouterRequest]
    n: int
    report_cached: bool = True  # False: usage says 0 cached tokens (the router's report_cached_tokens)

    @property
    def id(self) -> str:
        return self.reqs[0].request_id

    def usage(self, completion: int) -> dict:
        prompt = sum(len(r.prompt_ids) for r in self.reqs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": sum(r.cached_tokens for r in self.reqs) if self.report_cached else 0}}


async def _numbered(base: int, first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    """A request's chunks, their choice indexes counted from `base`."""
    async with aclosing(rest):
        yield replace(first, index=base + first.index)
        async for chunk in rest:
            yield replace(chunk, index=base + chunk.index)


def _final(batch: Batch, chunks: list[Chunk], shape: Shape) -> dict:
    choices = []
    for index in range(len(batch.reqs) * batch.n):
        mine = [c for c in chunks if c.index == index]
        choice = shape.choice(mine, index, delta=False, echo=shape.echo[index // batch.n] if shape.echo else None)
        choice["token_ids"] = [t for c in mine for t in c.token_ids]
        choices.append(choice)
    return {
        "id": f"{'chatcmpl' if shape.chat else 'cmpl'}-{batch.id}",
        "object": "chat.completion" if shape.chat else "text_completion",
        "created": int(time.time()), "model": shape.model, "choices": choices,
        "usage": batch.usage(sum(len(c.token_ids) for c in chunks)),
        "token_ids": choices[0]["token_ids"],
    }


async def _sse(batch: Batch, chunks: AsyncIterator[Chunk], shape: Shape, usage: bool) -> AsyncIterator[str]:
    kind = "chat.completion.chunk" if shape.chat else "text_completion"
    created = int(time.time())
    total = len(batch.reqs) * batch.n
    begun = [False] * total
    completion = 0

    def event(choices: list[dict], **extra) -> str:
        body = {"id": f"{'chatcmpl' if shape.chat else 'cmpl'}-{batch.id}", "object": kind, "created": created,
                "model": shape.model, "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n"

    async with aclosing(chunks):
        try:
            async for chunk in chunks:
                i = chunk.index
                echo = shape.echo[i // batch.n] if shape.echo else None
                choice = shape.choice([chunk], i, delta=True, echo=echo, first=not begun[i])
                begun[i] = True
                completion += len(chunk.token_ids)
                yield event([choice], token_ids=chunk.token_ids, **({"usage": None} if usage else {}))
        except Exception as exc:  # the status is already sent: the failure goes in an error event
            status = _client_status(exc)
            error = {"message": status.message, "type": status.http.kind, "param": status.field,
                     "code": status.http.status}
            yield f"data: {json.dumps({'error': error})}\n\n"
    if usage:
        yield event([], usage=batch.usage(completion))
    yield "data: [DONE]\n\n"
