"""Unseeded requests get a seed drawn once by the router; the wire can say "no seed"; seeds survive conversion."""

from __future__ import annotations

from services.common.convert import sampling_from_proto, sampling_to_proto
from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams
from services.common.tokenizer import ByteTokenizer
from services.router.request import RequestBuilder


def _builder(tiny_llama_dir: str) -> RequestBuilder:
    return RequestBuilder(ModelConfig.from_folder(tiny_llama_dir), ByteTokenizer(), "tiny", 10_000)


def test_the_wire_keeps_seed_presence() -> None:
    assert sampling_from_proto(sampling_to_proto(SamplingParams(seed=None))).seed is None
    for seed in (0, 7, -(2**63), 2**63 - 1):
        assert sampling_from_proto(sampling_to_proto(SamplingParams(seed=seed))).seed == seed


def test_unseeded_requests_get_distinct_seeds_kept_with_the_request(tiny_llama_dir: str) -> None:
    builder = _builder(tiny_llama_dir)
    reqs = [builder.build(prompt="hi", prompt_ids=[], params=SamplingParams(temperature=1.0)) for _ in range(3)]
    seeds = [r.params.seed for r in reqs]
    assert None not in seeds and len(set(seeds)) == 3
    assert all(sampling_to_proto(r.params).HasField("seed") for r in reqs)


def test_a_given_seed_is_kept(tiny_llama_dir: str) -> None:
    req = _builder(tiny_llama_dir).build(prompt="hi", prompt_ids=[], params=SamplingParams(temperature=1.0, seed=0))
    assert req.params.seed == 0
