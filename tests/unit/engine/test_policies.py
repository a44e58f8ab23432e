"""The four scheduler policies give the same tokens; seeded sampling does not depend on batch or policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.sampling import SamplingParams
from services.engine.engine import LLMEngine

PROMPTS = [[1, *range(40, 40 + n)] for n in (5, 23, 40, 2)]
GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)


def disaggregated(prefill: LLMEngine, decode: LLMEngine, prompts: list[list[int]],
                  params: list[SamplingParams]) -> list[list[int]]:
    """Prefill on one engine, copy each request's KV blocks into blocks reserved on the other, decode there."""
    rids = [f"r{i}" for i in range(len(prompts))]
    for rid, prompt, p in zip(rids, prompts, params):
        prefill.add_request(rid, prompt, replace(p))
    outputs: dict[str, list[int]] = {}
    while prefill.has_work():
        for out in prefill.step():
            assert out.prefilled and not out.finished
            i = rids.index(out.request_id)
            held = prefill.prefilled[out.request_id]
            block_ids = decode.reserve_blocks(len(prompts[i]))
            assert block_ids is not None and len(block_ids) == len(held.block_ids)
            decode.runner.pool.tensor[block_ids] = prefill.runner.pool.tensor[held.block_ids]
            decode.add_prefilled(out.request_id, prompts[i], out.new_token_ids[0], replace(params[i]), block_ids,
                                 carried=out.block_hashes)
            prefill.release_prefilled(out.request_id)
            outputs[out.request_id] = list(out.new_token_ids)
    assert prefill.blocks.num_used == 0 and not prefill.prefilled
    while decode.has_work():
        for out in decode.step():
            outputs[out.request_id].extend(out.new_token_ids)
    assert decode.blocks.num_used == 0
    return [outputs[rid] for rid in rids]


def run_policy(make_engine, policy: str, prompts: list[list[int]], params: list[SamplingParams],
               decode_blocks: int = 64) -> list[list[int]]:
    if policy == "disaggregated":
        # scattered free lists on the decode side, so pulled blocks land at other ids than they had
        decode = make_engine(policy="decode", num_blocks=decode_blocks, block_size=4)
        decode.blocks.free(decode.blocks.allocate(decode_blocks)[::-1])
        return disaggregated(make_engine(policy="prefill", num_blocks=64, block_size=4, max_batch_tokens=32),
                             decode, prompts, params)
    # max_batch_tokens=16 makes chunked cut the 23- and 40-token prompts into several chunks
    engine = make_engine(policy=policy, num_blocks=64, block_size=4, max_batch_tokens=16)
    result = engine.generate(prompts, [replace(p) for p in params])
    assert engine.blocks.num_used == 0
    return result


POLICIES = ["colocated", "chunked", "disaggregated"]


def test_policies_agree_on_greedy_tokens(make_engine) -> None:
    alone = [make_engine(num_blocks=64).generate([p], GREEDY)[0] for p in PROMPTS]
    assert all(len(out) == GREEDY.max_tokens for out in alone)
    for policy in POLICIES:
        assert run_policy(make_engine, policy, PROMPTS, [GREEDY] * len(PROMPTS)) == alone, policy


def test_decode_instance_preempts_and_recomputes(make_engine) -> None:
    """A decode pool that holds the pulled prompts but not their growth: preempted requests recompute there."""
    prompts = [[1, *range(60 + 9 * i, 68 + 9 * i)] for i in range(4)]  # 9 tokens: 3 blocks each of 13 in the pool
    alone = [make_engine(num_blocks=64).generate([p], GREEDY)[0] for p in prompts]
    params = [replace(GREEDY, seed=i, temperature=0.7) for i in range(4)]
    sampled_alone = [make_engine(num_blocks=64).generate([p], q)[0] for p, q in zip(prompts, params)]
    assert run_policy(make_engine, "disaggregated", prompts, [GREEDY] * 4, decode_blocks=13) == alone
    assert run_policy(make_engine, "disaggregated", prompts, params, decode_blocks=13) == sampled_alone


def sampled(seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=12, temperature=1.0, top_p=0.95, top_k=50, seed=seed, ignore_eos=True)


@pytest.mark.parametrize("policy", POLICIES)
def test_seeded_sampling_is_independent_of_batch_and_policy(make_engine, policy) -> None:
    reference = make_engine(num_blocks=64).generate([PROMPTS[1]], sampled(11))[0]
    params = [sampled(5), sampled(11), sampled(11), sampled(12)]
    outs = run_policy(make_engine, policy, [PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[3]], params)
    assert outs[1] == outs[2] == reference
    assert len(set(map(tuple, outs))) == 3  # other seeds, other tokens


def test_other_seed_gives_other_tokens(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    outs = engine.generate([PROMPTS[1]] * 4, [sampled(s) for s in range(4)])
    assert len(set(map(tuple, outs))) == 4


def test_top_k_one_is_greedy(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    greedy = engine.generate(PROMPTS, GREEDY)
    assert engine.generate(PROMPTS, replace(GREEDY, temperature=1.5, top_k=1, seed=3)) == greedy
