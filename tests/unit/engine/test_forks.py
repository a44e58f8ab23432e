"""n choices of one prompt on a colocated or chunked engine: the prompt computed once, its blocks shared, each
choice sampled as if alone with its own seed, and every block back in the pool at the end or on abort."""

from __future__ import annotations

import pytest

from services.common.sampling import SamplingParams, choice_seed
from services.engine.engine import fork_id

SAMPLED = SamplingParams(max_tokens=8, temperature=1.0, seed=7, ignore_eos=True)


def _run(engine, request_id: str, prompt: list[int], params: SamplingParams, n: int):
    ids = engine.add_request(request_id, prompt, params, n)
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}
    kinds = []
    while engine.has_work():
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
        kinds.append(engine.last_step.kind)
    return [tokens[rid] for rid in ids], kinds


# prompt lengths: the last prompt position inside a block (copied) and at a block's start (nothing to copy)
@pytest.mark.parametrize("policy", ["colocated", "chunked"])
@pytest.mark.parametrize("prompt_len", [11, 13])
def test_choices_share_one_prefill_and_equal_lone_requests(make_engine, policy: str, prompt_len: int) -> None:
    prompt = [1, *range(40, 40 + prompt_len - 1)]
    engine = make_engine(policy=policy, num_blocks=32, block_size=4, max_batch_tokens=64)
    got, kinds = _run(engine, "r", prompt, SAMPLED, n=4)
    assert [k for k in kinds if k != "decode"] == ["prefill"]  # the prompt computed once, for four
    assert engine.blocks.num_used == 0
    alone = make_engine(policy="colocated", num_blocks=64, block_size=4)
    want = alone.generate([prompt] * 4, [SamplingParams(max_tokens=8, temperature=1.0, seed=choice_seed(7, i),
                                                        ignore_eos=True) for i in range(4)])
    assert got == want and len({tuple(t) for t in got}) == 4


def test_choices_hold_the_prompt_blocks_once(make_engine) -> None:
    prompt = [1, *range(40, 53)]  # 14 tokens: 3 whole blocks shared, the 4th (the last, 13) copied per choice
    engine = make_engine(policy="colocated", num_blocks=32, block_size=4)
    engine.add_request("r", prompt, SAMPLED, n=4)
    engine.step()
    # the parent: 4 blocks (its first token at position 14 still fits); each other choice: one block of its own
    assert engine.blocks.num_used == 4 + 3
    engine.step()
    assert engine.blocks.num_used == 4 + 3


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_aborting_every_choice_frees_every_block(make_engine, steps: int) -> None:
    engine = make_engine(policy="chunked", num_blocks=32, block_size=4, max_batch_tokens=8)  # 2-chunk prompt
    ids = engine.add_request("r", [1, *range(40, 54)], SAMPLED, n=3)
    for _ in range(steps):
        engine.step()
    for rid in reversed(ids):  # the choices before their parent, which may still hold them unforked
        assert engine.abort(rid)
    assert engine.blocks.num_used == 0 and not engine.has_work()
    assert engine.add_request("r", [1, 2, 3], SAMPLED, n=3) == ["r", fork_id("r", 1), fork_id("r", 2)]  # ids free


def test_n_is_refused_where_choices_cannot_share(make_engine) -> None:
    from services.common.errors import EngineInputError

    with pytest.raises(EngineInputError, match="n"):
        make_engine(policy="prefill", num_blocks=8).add_request("r", [1, 2], SAMPLED, n=2)


@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_every_choice_gets_the_prompt_logprobs_computed_once(make_engine, policy: str) -> None:
    prompt = [1, *range(40, 53)]
    engine = make_engine(policy=policy, num_blocks=32, block_size=4, max_batch_tokens=8)  # chunked: 2 chunks
    engine.add_request("r", prompt, SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=2), n=3)
    firsts = {}
    while engine.has_work():
        for out in engine.step():
            firsts.setdefault(out.request_id, out.prompt_logprobs)
    assert len(firsts) == 3
    assert all([t.token_id for t in got] == prompt[1:] for got in firsts.values())
    assert firsts["r"] == firsts[fork_id("r", 1)] == firsts[fork_id("r", 2)]
