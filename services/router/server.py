"""gRPC servicer of distserve.v1.Router: protobuf in, RouterCore, a stream of GenerateResponse out."""

from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import asdict

import grpc

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.api_keys import ApiKeys
from services.common.chat_template import template_variables
from services.common.convert import grammar_from_proto, logprobs_to_proto, penalties_from_proto
from services.common.errors import EngineInputError, abort_with
from services.common.generation_config import SamplingDefaults
from services.common.sampling import SamplingParams
from services.router.core import RouterCore
from services.router.request import RequestBuilder
from services.router.slo import requested_slo


def params_from_request(request: router_pb2.GenerateRequest, default_max_tokens: int,
                        defaults: SamplingDefaults) -> SamplingParams:
    """`defaults`: the sampling of the fields the request leaves unset."""
    given = {name: getattr(request, name) for name in ("temperature", "top_p", "top_k", "repetition_penalty")
             if request.HasField(name)}
    return SamplingParams(
        max_tokens=request.max_tokens if request.HasField("max_tokens") else default_max_tokens,
        seed=request.seed if request.HasField("seed") else None,
        stop_token_ids=tuple(request.stop_token_ids),
        ignore_eos=request.ignore_eos,
        stop=tuple(request.stop),
        logprobs=request.logprobs if request.HasField("logprobs") else None,
        grammar=grammar_from_proto(request.structured_outputs),
        skip_special_tokens=request.skip_special_tokens if request.HasField("skip_special_tokens") else True,
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        **{**penalties_from_proto(request), **asdict(defaults), **given},
    )


def chat_from_request(request: router_pb2.GenerateRequest) -> dict:
    """The keyword arguments of `RequestBuilder.chat_prompt` for a request's messages. Raises EngineInputError."""
    if request.prompt or request.prompt_token_ids:
        raise EngineInputError("messages", "give prompt, prompt_token_ids or messages (one of them)")
    try:
        kwargs = json.loads(request.chat_template_kwargs) if request.chat_template_kwargs else {}
    except json.JSONDecodeError as exc:
        raise EngineInputError("chat_template_kwargs", f"not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise EngineInputError("chat_template_kwargs", "must be a JSON object")
    messages = [{"role": m.role, "content": [{"type": "text", "text": t} for t in m.content_parts] if m.content_parts
                 else m.content, "name": m.name or None} for m in request.messages]
    return {**template_variables(kwargs), "messages": messages, "continue_final_message": request.continue_final_message,
            "add_generation_prompt": request.add_generation_prompt if request.HasField("add_generation_prompt") else True}


class RouterServicer(router_pb2_grpc.RouterServicer):
    def __init__(self, core: RouterCore, builder: RequestBuilder, default_max_tokens: int,
                 keys: ApiKeys | None = None) -> None:
        self.core = core
        self.keys = keys or ApiKeys()
        self.builder = builder
        self.default_max_tokens = default_max_tokens

    async def Generate(self, request: router_pb2.GenerateRequest, context: grpc.aio.ServicerContext):
        try:
            metadata = dict(context.invocation_metadata() or ())
            prompt_ids = list(request.prompt_token_ids)
            if request.messages:
                self.builder.check_model(request.model)
                prompt_ids = self.builder.chat_prompt(**chat_from_request(request))
            req = self.builder.build(prompt=request.prompt, prompt_ids=prompt_ids,
                                     params=params_from_request(request, self.default_max_tokens, self.builder.sampling),
                                     model=request.model, request_id=request.request_id,
                                     timeout_s=context.time_remaining(), n=request.n if request.HasField("n") else 1,
                                     tenant=self.keys.tenant(metadata.get("authorization")),
                                     cache_salt=request.cache_salt if request.HasField("cache_salt") else None)
            req.slo = requested_slo(metadata)
            completion = [0] * req.n
            report = self.builder.report_cached_tokens
            async with aclosing(self.core.generate(req)) as stream:  # a cancelled client closes it at once
                async for chunk in stream:
                    completion[chunk.index] += len(chunk.token_ids)
                    last = bool(chunk.finish_reason)
                    yield router_pb2.GenerateResponse(
                        token_ids=chunk.token_ids, text=chunk.text, finish_reason=chunk.finish_reason,
                        request_id=req.public_id, prompt_tokens=len(req.prompt_ids) if last else 0,
                        completion_tokens=completion[chunk.index] if last else 0, index=chunk.index,
                        logprobs=logprobs_to_proto(chunk.logprobs),
                        prompt_logprobs=logprobs_to_proto(chunk.prompt_logprobs),
                        cached_tokens=req.cached_tokens if last and report else 0,
                        decode_cached_tokens=req.decode_cached_tokens if last and report else 0)
        except Exception as exc:
            await abort_with(context, exc)
