"""Bad requests raise EngineInputError naming the field, and leave nothing allocated or queued."""

from __future__ import annotations

import pytest

from services.common.errors import EngineInputError
from services.common.sampling import SamplingParams

PROMPT = [1, 40, 41, 42]


@pytest.mark.parametrize(
    ("prompt", "params", "field"),
    [
        ([], SamplingParams(), "prompt"),
        ([1] * 2048, SamplingParams(max_tokens=1), "prompt"),
        ([1] * 2000, SamplingParams(max_tokens=100), "max_tokens"),
        (PROMPT, SamplingParams(max_tokens=0), "max_tokens"),
        (PROMPT, SamplingParams(temperature=-0.1), "temperature"),
        (PROMPT, SamplingParams(temperature=float("nan")), "temperature"),
        (PROMPT, SamplingParams(top_p=0.0), "top_p"),
        (PROMPT, SamplingParams(top_p=1.5), "top_p"),
        (PROMPT, SamplingParams(top_k=-1), "top_k"),
        (PROMPT, SamplingParams(top_k=2**31), "top_k"),
        (PROMPT, SamplingParams(seed=2**63), "seed"),
        (PROMPT, SamplingParams(seed=-(2**63) - 1), "seed"),
        (PROMPT, SamplingParams(stop_token_ids=(2**31,)), "stop_token_ids"),
        (PROMPT, SamplingParams(stop_token_ids=(-1,)), "stop_token_ids"),
        ([1, 259], SamplingParams(), "prompt_token_ids"),
        ([1, -1], SamplingParams(), "prompt_token_ids"),
        ([1, 2.5], SamplingParams(), "prompt_token_ids"),
    ],
)
def test_bad_request_names_field_and_allocates_nothing(make_engine, prompt, params, field) -> None:
    engine = make_engine(num_blocks=256)
    with pytest.raises(EngineInputError) as err:
        engine.add_request("r", prompt, params)
    assert err.value.field == field
    assert str(err.value).startswith(field)
    assert engine.blocks.num_used == 0 and not engine.has_work()
    engine.add_request("r", PROMPT, SamplingParams(max_tokens=2))  # the id was not taken by the refusal
    assert len(engine.generate([PROMPT], SamplingParams(max_tokens=2))[0]) == 2
    assert engine.blocks.num_used == 0 and not engine.has_work()


def test_request_larger_than_pool_is_refused(make_engine) -> None:
    engine = make_engine(num_blocks=2, block_size=4)
    with pytest.raises(EngineInputError) as err:
        engine.add_request("r", PROMPT, SamplingParams(max_tokens=5))
    assert err.value.field == "max_tokens"
    assert engine.blocks.num_used == 0 and not engine.has_work()


def test_duplicate_request_id_is_refused(make_engine) -> None:
    engine = make_engine(num_blocks=16)
    engine.add_request("r", PROMPT, SamplingParams())
    with pytest.raises(EngineInputError) as err:
        engine.add_request("r", PROMPT, SamplingParams())
    assert err.value.field == "request_id"
    assert len(engine.scheduler.waiting) == 1
