"""Structured output in the engine: every policy's tokens follow the grammar, alike with a seed; a grammar that
cannot finish ends with `length`; a bad grammar or a refused first token is refused with nothing allocated."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from services.common.errors import EngineInputError
from services.common.grammars import from_choice, from_json_schema
from services.common.sampling import FinishReason, SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.make_model import make_model
from tests.unit.engine.test_policies import run_policy

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 9},
                                           "unit": {"enum": ["c", "f"]}},
          "required": ["city", "days", "unit"], "additionalProperties": False}
PROMPTS = [[1, *range(40, 40 + n)] for n in (5, 23, 40)]


def test_every_policy_samples_the_same_valid_json_with_a_seed(make_engine, tiny_llama_dir: str) -> None:
    params = [SamplingParams(max_tokens=60, temperature=1.0, seed=7 + i, grammar=from_json_schema(SCHEMA, "f"))
              for i in range(len(PROMPTS))]
    outputs = {policy: run_policy(make_engine, policy, PROMPTS, params)
               for policy in ("colocated", "chunked", "disaggregated")}
    assert outputs["chunked"] == outputs["colocated"] == outputs["disaggregated"]
    tokenizer = load_tokenizer(tiny_llama_dir)
    for tokens in outputs["colocated"]:
        jsonschema.validate(json.loads(tokenizer.decode(tokens)), SCHEMA)


def test_a_preempted_request_recomputes_and_stays_in_its_grammar(make_engine, tiny_llama_dir: str) -> None:
    params = [SamplingParams(max_tokens=60, temperature=1.0, seed=3 + i, grammar=from_json_schema(SCHEMA, "f"))
              for i in range(len(PROMPTS))]
    roomy = run_policy(make_engine, "disaggregated", PROMPTS, params)
    tight = run_policy(make_engine, "disaggregated", PROMPTS, params, decode_blocks=34)  # the decode preempts
    assert tight == roomy


def test_a_choice_ends_at_one_of_its_strings(make_engine, tiny_llama_dir: str) -> None:
    engine = make_engine(num_blocks=64)
    params = SamplingParams(max_tokens=20, temperature=1.0, seed=1, grammar=from_choice(["yes", "no", "maybe"], "f"))
    tokens = engine.generate(PROMPTS, params)
    assert {load_tokenizer(tiny_llama_dir).decode(t) for t in tokens} <= {"yes", "no", "maybe"}


def test_a_grammar_that_cannot_finish_in_max_tokens_ends_with_length(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    engine.add_request("r", PROMPTS[0], SamplingParams(max_tokens=3, grammar=from_json_schema(SCHEMA, "f")))
    outputs = [out for _ in range(5) for out in engine.step()]
    assert [o.finish_reason for o in outputs] == [None, None, FinishReason.LENGTH]


def test_a_grammar_the_engine_cannot_compile_is_refused_before_any_block(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    with pytest.raises(EngineInputError) as err:
        engine.add_request("r", PROMPTS[0], SamplingParams(grammar="start: /[a-/"))
    assert err.value.field == "grammar"
    assert engine.blocks.num_used == 0 and not engine.has_work()


def test_a_first_token_outside_the_grammar_is_refused_and_its_blocks_freed(make_engine) -> None:
    engine = make_engine(policy="decode", num_blocks=16, block_size=4)
    blocks = engine.reserve_blocks(len(PROMPTS[0]))
    x = load_tokenizer(engine.config.model).encode("x", add_special_tokens=False)[0]
    with pytest.raises(EngineInputError) as err:
        engine.add_prefilled("r", PROMPTS[0], x, replace(SamplingParams(grammar=from_json_schema(SCHEMA, "f"))), blocks)
    assert err.value.field == "first_token"
    assert engine.blocks.num_used == 0
    engine.add_prefilled("r", PROMPTS[0], None, SamplingParams(grammar=from_json_schema(SCHEMA, "f")),
                         engine.reserve_blocks(len(PROMPTS[0])))  # the id is free again


def test_a_re_prefill_of_prompt_and_output_goes_on_where_the_output_stopped(make_engine) -> None:
    params = SamplingParams(max_tokens=40, temperature=1.0, seed=5, grammar=from_json_schema(SCHEMA, "f"))
    (whole,) = make_engine(num_blocks=64).generate([PROMPTS[0]], replace(params))
    cut = 7
    again = make_engine(num_blocks=64).generate([PROMPTS[0] + whole[:cut]],
                                                replace(params, max_tokens=40 - cut, resumed_tokens=cut))[0]
    assert whole[:cut] + again == whole
    with pytest.raises(EngineInputError) as err:  # "a" cannot begin the JSON object: not output of this grammar
        make_engine(num_blocks=64).add_request("r", PROMPTS[0] + [100], replace(params, resumed_tokens=1))
    assert err.value.field == "resumed_tokens"


def test_a_tokenizer_the_grammar_engine_cannot_take_serves_unconstrained_requests(make_engine, tmp_path) -> None:
    folder = make_model("tiny-llama", tmp_path, overrides={"vocab_size": 200})  # its tokenizer has 259 tokens
    engine = make_engine(model=str(folder), num_blocks=16)
    with pytest.raises(EngineInputError) as err:
        engine.add_request("r", PROMPTS[0], SamplingParams(grammar=from_choice(["a"], "f")))
    assert err.value.field == "grammar" and "cannot constrain" in str(err.value)
    assert len(engine.generate([PROMPTS[0]], SamplingParams(max_tokens=3, ignore_eos=True))[0]) == 3
