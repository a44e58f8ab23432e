"""Extreme but valid sampling values yield tokens: no request can make a step fail for the others."""

from __future__ import annotations

import pytest

from services.common.sampling import INT32_MAX, SamplingParams

PROMPT = [1, 40, 41, 42]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1e-39, seed=1),
        SamplingParams(temperature=5e-324, seed=2),
        SamplingParams(temperature=1e38, seed=3),
        SamplingParams(temperature=1.7e308, seed=4),
        SamplingParams(temperature=1.0, top_p=5e-324, seed=5),
        SamplingParams(temperature=1.0, top_k=INT32_MAX, seed=6),
        SamplingParams(temperature=1e-39, top_k=1, top_p=1e-9, seed=-(2**63)),
    ],
)
def test_extreme_values_sample_tokens_beside_a_greedy_request(make_engine, params: SamplingParams) -> None:
    engine = make_engine(num_blocks=64)
    greedy = SamplingParams(max_tokens=6, ignore_eos=True)
    params.max_tokens, params.ignore_eos = 6, True
    extreme, alongside = engine.generate([PROMPT, PROMPT], [params, greedy])
    assert len(extreme) == 6 and all(0 <= t < engine.model_config.vocab_size for t in extreme)
    assert alongside == engine.generate([PROMPT], greedy)[0]
    assert engine.blocks.num_used == 0


def test_a_vanishing_temperature_samples_the_greedy_tokens(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    greedy = engine.generate([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    tiny = engine.generate([PROMPT], SamplingParams(max_tokens=8, ignore_eos=True, temperature=1e-39, seed=9))[0]
    assert tiny == greedy
