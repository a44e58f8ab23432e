"""Protobuf ⇄ engine dataclass conversions shared by the servicers and the router."""

from __future__ import annotations

from distserve.v1 import worker_pb2
from services.common.sampling import SamplingParams


def sampling_from_proto(p: worker_pb2.SamplingParams) -> SamplingParams:
    return SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
                          seed=p.seed, stop_token_ids=tuple(p.stop_token_ids), ignore_eos=p.ignore_eos)


def sampling_to_proto(p: SamplingParams) -> worker_pb2.SamplingParams:
    return worker_pb2.SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p,
                                     top_k=p.top_k, seed=p.seed or 0, ignore_eos=p.ignore_eos,
                                     stop_token_ids=list(p.stop_token_ids))
