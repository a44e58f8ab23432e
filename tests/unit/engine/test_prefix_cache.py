"""Prefix caching in the engine: the same tokens and logprobs as without it, and only the uncached tokens computed."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from services.common import prefix_hash
from services.common.sampling import SamplingParams
from services.engine.engine import LLMEngine

SYSTEM = [1, *range(100, 137)]  # 38 tokens: 9 full blocks of 4 and 2 over
PROMPTS = [SYSTEM + [7, 8, 9], SYSTEM + [7, 8], SYSTEM[:20] + [5] * 9, SYSTEM + [7, 8, 9]]
PARAMS = SamplingParams(max_tokens=6, ignore_eos=True, logprobs=2)


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams = PARAMS, n: int = 1,
        namespace: str = "") -> dict[str, tuple[list[int], list[float]]]:
    """Runs the prompts one after another (each one's blocks cached when the next starts): tokens and logprobs."""
    results: dict[str, tuple[list[int], list[float]]] = {}
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, replace(params), n=n, cache_namespace=namespace)
        while engine.has_work():
            for out in engine.step():
                tokens, logprobs = results.setdefault(out.request_id, ([], []))
                tokens.extend(out.new_token_ids)
                logprobs.extend(lp.logprob for lp in out.logprobs)
    assert engine.blocks.num_used == 0
    return results


def assert_same(cached: dict, uncached: dict) -> None:
    assert cached.keys() == uncached.keys()
    for rid, (tokens, logprobs) in uncached.items():
        assert cached[rid][0] == tokens, rid
        assert cached[rid][1] == pytest.approx(logprobs, abs=1e-4), rid


@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_cached_prefixes_give_the_same_tokens_and_logprobs(make_engine, policy: str) -> None:
    config = dict(policy=policy, num_blocks=64, block_size=4, max_batch_tokens=16)
    on, off = make_engine(**config), make_engine(**config, prefix_caching="off")
    assert_same(run(on, PROMPTS), run(off, PROMPTS))
    # r1 finds SYSTEM's 9 full blocks; r2 the 5 blocks of SYSTEM[:20]; r3 all of r0's 10 full prompt blocks
    # but the one holding its last token, whose position is computed again to sample from
    assert on.scheduler.cache.hit == (9 + 5 + 10) * 4
    assert off.scheduler.cache.hit == 0


def test_choices_of_a_cached_prompt_equal_those_without_the_cache(make_engine) -> None:
    params = SamplingParams(max_tokens=5, temperature=1.0, seed=3, ignore_eos=True, logprobs=0)
    on, off = make_engine(num_blocks=64, block_size=4), make_engine(num_blocks=64, block_size=4, prefix_caching="off")
    assert_same(run(on, PROMPTS[:2], params, n=3), run(off, PROMPTS[:2], params, n=3))
    assert on.scheduler.cache.hit == 9 * 4


def test_a_follow_up_turn_computes_only_its_new_tokens(make_engine) -> None:
    """Turn 2's prompt is turn 1's prompt, its answer and a new message: the blocks decode filled are cached too."""
    engine = make_engine(num_blocks=64, block_size=4)
    first = run(engine, [SYSTEM])["r0"][0]
    engine.scheduler.cache.hit = 0
    turn2 = SYSTEM + first + [11, 12, 13, 14, 15]
    engine.add_request("t2", turn2, replace(PARAMS))
    engine.step()
    computed = engine.last_step.tokens
    cached = (len(SYSTEM) + len(first) - 1) // 4 * 4  # the last answer token's K/V was never computed
    assert engine.scheduler.cache.hit == cached
    assert computed == len(turn2) - cached
    while engine.has_work():
        engine.step()
    engine.scheduler.cache.hit = 0  # turn 2's blocks, computed after its hit, are cached in turn
    engine.add_request("t3", turn2 + [16, 17, 18], replace(PARAMS))
    engine.step()
    assert engine.scheduler.cache.hit == len(turn2) // 4 * 4


def test_a_turn_that_started_on_cached_blocks_caches_the_blocks_it_fills(make_engine) -> None:
    """Turn 3 finds turn 2's blocks, though turn 2 itself started on turn 1's cached ones."""
    engine = make_engine(num_blocks=64, block_size=4)
    first = run(engine, [SYSTEM])["r0"][0]
    turn2 = SYSTEM + first + [11, 12, 13, 14, 15]
    second = run(engine, [turn2])["r0"][0]
    engine.scheduler.cache.hit = 0
    run(engine, [turn2 + second + [16, 17]])
    assert engine.scheduler.cache.hit == (len(turn2) + len(second) - 1) // 4 * 4


def test_namespaces_do_not_share_blocks(make_engine) -> None:
    engine = make_engine(num_blocks=64, block_size=4)
    run(engine, PROMPTS[:1], namespace="tenant-a")
    run(engine, PROMPTS[:1], namespace="tenant-b")
    assert engine.scheduler.cache.hit == 0
    run(engine, PROMPTS[:1], namespace="tenant-a")
    assert engine.scheduler.cache.hit == 10 * 4


def test_prompt_logprobs_are_computed_for_every_position(make_engine) -> None:
    engine = make_engine(num_blocks=64, block_size=4)
    run(engine, PROMPTS[:1])
    engine.add_request("echo", PROMPTS[0], replace(PARAMS, prompt_logprobs=0))
    while engine.has_work():
        for out in engine.step():
            if out.prompt_logprobs:
                assert len(out.prompt_logprobs) == len(PROMPTS[0]) - 1
    assert engine.scheduler.cache.hit == 0


def test_a_pool_too_small_for_the_cache_evicts_and_stays_exact(make_engine) -> None:
    """12 blocks of 4: each prompt evicts blocks an earlier one cached; tokens stay those of the uncached engine."""
    prompts = [SYSTEM[:30] + [i] * 3 for i in range(5)] + [SYSTEM[:30] + [2] * 3]
    on = make_engine(num_blocks=12, block_size=4)
    off = make_engine(num_blocks=12, block_size=4, prefix_caching="off")
    assert_same(run(on, prompts), run(off, prompts))
    assert on.blocks.num_free == 12 and on.blocks.num_cached > 0


def test_disaggregated_prefill_and_decode_with_caching_equal_no_caching(make_engine) -> None:
    """Prefill caches its prompts; decode caches the pulled prompts and its answers; neither changes a token."""
    from tests.unit.engine.test_policies import disaggregated

    def pair(caching: str) -> tuple[LLMEngine, LLMEngine]:
        return (make_engine(policy="prefill", num_blocks=64, block_size=4, prefix_caching=caching),
                make_engine(policy="decode", num_blocks=64, block_size=4, prefix_caching=caching))

    greedy = replace(PARAMS, logprobs=None)
    on, off = pair("on"), pair("off")
    outs_on = [disaggregated(*on, [p], [greedy])[0] for p in PROMPTS]
    outs_off = [disaggregated(*off, [p], [greedy])[0] for p in PROMPTS]
    assert outs_on == outs_off
    assert on[0].scheduler.cache.hit == (9 + 5 + 10) * 4
    assert on[1].blocks.num_cached > 0


class _SharedLeadingBytes:
    """hashlib whose digests all begin with the same 8 bytes: every 64-bit block address collides."""

    def __getattr__(self, name: str):
        make = getattr(hashlib, name)

        class Digest:
            def __init__(self, *args, **kwargs) -> None:
                self._h = make(*args, **kwargs)

            def update(self, data: bytes) -> None:
                self._h.update(data)

            def digest(self) -> bytes:
                return bytes(8) + self._h.digest()[8:]

        return Digest


def test_blocks_whose_first_64_hash_bits_collide_are_not_confused(make_engine, monkeypatch) -> None:
    monkeypatch.setattr(prefix_hash, "hashlib", _SharedLeadingBytes())
    first, other = [1, *range(100, 120)], [1, *range(200, 220)]  # 5 full blocks of 4 each, none alike
    engine = make_engine(num_blocks=64, block_size=4)
    tokens = run(engine, [first, other])
    assert engine.scheduler.cache.hit == 0
    assert tokens["r1"] == run(make_engine(num_blocks=64, block_size=4, prefix_caching="off"), [other])["r0"]
