"""Protobuf ⇄ engine dataclass conversions shared by the servicers and the router."""

from __future__ import annotations

from collections.abc import Iterable

from distserve.v1 import logprobs_pb2, router_pb2, worker_pb2
from services.common.grammars import structured_grammar
from services.common.sampling import SamplingParams, TokenLogprobs


def sampling_from_proto(p: worker_pb2.SamplingParams) -> SamplingParams:
    return SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
                          seed=p.seed if p.HasField("seed") else None, stop_token_ids=tuple(p.stop_token_ids),
                          ignore_eos=p.ignore_eos, logprobs=p.logprobs if p.HasField("logprobs") else None,
                          grammar=p.grammar, resumed_tokens=p.resumed_tokens, **penalties_from_proto(p))


def penalties_from_proto(p: worker_pb2.SamplingParams | router_pb2.GenerateRequest) -> dict:
    """The penalty, bias, min_tokens and prompt_logprobs fields, which the worker and router messages spell alike."""
    return {"presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
            "repetition_penalty": p.repetition_penalty if p.HasField("repetition_penalty") else 1.0,
            "logit_bias": tuple(sorted(p.logit_bias.items())), "min_tokens": p.min_tokens,
            "prompt_logprobs": p.prompt_logprobs if p.HasField("prompt_logprobs") else None}


def grammar_from_proto(s: router_pb2.StructuredOutputs, field: str = "structured_outputs") -> str:
    """The Lark grammar of a Generate request's structured output ("" when none); EngineInputError naming the
    field when it is bad."""
    return structured_grammar(json=s.json or None, json_object=s.json_object, regex=s.regex or None,
                              choice=list(s.choice) or None, grammar=s.grammar or None, field=field)


def sampling_to_proto(p: SamplingParams) -> worker_pb2.SamplingParams:
    return worker_pb2.SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p,
                                     top_k=p.top_k, seed=p.seed, ignore_eos=p.ignore_eos,
                                     stop_token_ids=list(p.stop_token_ids), logprobs=p.logprobs,
                                     presence_penalty=p.presence_penalty, frequency_penalty=p.frequency_penalty,
                                     repetition_penalty=p.repetition_penalty, logit_bias=dict(p.logit_bias),
                                     min_tokens=p.min_tokens, prompt_logprobs=p.prompt_logprobs, grammar=p.grammar,
                                     resumed_tokens=p.resumed_tokens)


def logprobs_to_proto(items: Iterable[TokenLogprobs]) -> list[logprobs_pb2.TokenLogprobs]:
    return [logprobs_pb2.TokenLogprobs(token_id=t.token_id, logprob=t.logprob, top_ids=[i for i, _ in t.top],
                                       top_logprobs=[v for _, v in t.top]) for t in items]


def logprobs_from_proto(items: Iterable[logprobs_pb2.TokenLogprobs]) -> list[TokenLogprobs]:
    return [TokenLogprobs(t.token_id, t.logprob, tuple(zip(t.top_ids, t.top_logprobs))) for t in items]
