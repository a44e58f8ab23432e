"""A follow-up turn on a decode engine that holds the last turn's K/V: only the blocks its cache lacks are copied
in (delta pull), and the tokens and logprobs are those of engines without caching."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.prefix_hash import block_hashes
from services.common.sampling import SamplingParams
from services.engine.engine import LLMEngine

SYSTEM = [1, *range(100, 137)]  # 38 tokens: 9 full blocks of 4 and 2 over
PARAMS = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=2)


def disagg_turn(prefill: LLMEngine, decode: LLMEngine, rid: str, prompt: list[int],
                namespace: str = "") -> tuple[list[int], list[float], int]:
    """Prefills on one engine, copies into the other the blocks its cache lacks, decodes there (in `namespace`, the
    prefill in the default one): the tokens, their logprobs and the blocks copied."""
    prefill.add_request(rid, prompt, replace(PARAMS))
    [out] = prefill.step()
    tokens, logprobs = list(out.new_token_ids), [lp.logprob for lp in out.logprobs]
    n = len(prompt)
    cached = decode.hold_cached(prompt, namespace, n, keep_tokens=n)
    wanted = decode.groups.missing(n, cached.num_blocks, n)
    rest = decode.blocks.allocate(len(wanted))
    held = prefill.prefilled[rid].block_ids
    decode.runner.pool.tensor[rest] = prefill.runner.pool.tensor[[held[i] for _, i in wanted]]
    decode.add_prefilled(rid, prompt, out.new_token_ids[0], replace(PARAMS), decode.groups.fill(cached.tables, rest, n),
                         namespace, out.block_hashes)
    prefill.release_prefilled(rid)
    while decode.has_work():
        for out in decode.step():
            tokens.extend(out.new_token_ids)
            logprobs.extend(lp.logprob for lp in out.logprobs)
    assert decode.blocks.num_used == prefill.blocks.num_used == 0
    return tokens, logprobs, len(rest)


@pytest.mark.parametrize("caching", ["on", "off"])
def test_a_follow_up_turn_copies_only_the_blocks_the_decode_cache_lacks(make_engine, caching: str) -> None:
    engines = [make_engine(policy=policy, num_blocks=64, block_size=4, prefix_caching=caching)
               for policy in ("prefill", "decode")]
    cold = [make_engine(policy=policy, num_blocks=64, block_size=4, prefix_caching="off")
            for policy in ("prefill", "decode")]
    first, _, copied = disagg_turn(*engines, "t1", SYSTEM)
    assert copied == 10
    turn2 = SYSTEM + first + [11, 12, 13, 14, 15]  # 51 tokens, 13 blocks
    tokens, logprobs, copied = disagg_turn(*engines, "t2", turn2)
    disagg_turn(*cold, "t1", SYSTEM)
    cold_tokens, cold_logprobs, _ = disagg_turn(*cold, "t2", turn2)
    assert tokens == cold_tokens and logprobs == pytest.approx(cold_logprobs, abs=1e-4)
    # the decode computed 45 of turn 1's 46 tokens (not the last answer token's K/V): 11 full blocks cached
    assert copied == (2 if caching == "on" else 13)


def test_blocks_pulled_into_a_prefill_and_cached_there_spare_their_computation(make_engine) -> None:
    """Reverse pull: a prefill engine copies in the decode's cached blocks its own cache lacks and caches them under
    the prompt's hashes; its prefill then computes only the rest, to the same first token and logprobs."""
    engines = [make_engine(policy=policy, num_blocks=64, block_size=4) for policy in ("prefill", "decode")]
    prefill, decode = engines
    first, _, _ = disagg_turn(*engines, "t1", SYSTEM)
    turn2 = SYSTEM + first + [11, 12, 13, 14, 15]
    leased = decode.hold_cached(turn2, "", len(turn2) - 1)
    own = prefill.hold_cached(turn2, "", leased.num_blocks * 4)
    assert (leased.num_blocks, own.num_blocks) == (11, 9)
    tokens = leased.num_blocks * 4
    wanted = prefill.groups.missing(tokens, own.num_blocks, tokens)
    pulled = prefill.blocks.allocate(len(wanted))
    lease = decode.groups.flat(leased.tables, tokens)
    prefill.runner.pool.tensor[pulled] = decode.runner.pool.tensor[[lease[i] for _, i in wanted]]
    carried = block_hashes(turn2, 4, "", leased.num_blocks)  # what the decode's lease carries
    assert prefill.vouched(turn2, "", carried)
    prefill.cache_prefix(prefill.groups.tables(prefill.groups.fill(own.tables, pulled, tokens), tokens), carried)
    decode.free_blocks(leased.held())
    prefill.add_request("t2", turn2, replace(PARAMS))
    [out] = prefill.step()
    prefill.free_blocks(own.held() + pulled)
    assert prefill.last_step.tokens == len(turn2) - 11 * 4 and out.num_cached_tokens == 11 * 4
    cold = make_engine(policy="prefill", num_blocks=64, block_size=4, prefix_caching="off")
    cold.add_request("t2", turn2, replace(PARAMS))
    [cold_out] = cold.step()
    assert out.new_token_ids == cold_out.new_token_ids
    assert out.logprobs[0].logprob == pytest.approx(cold_out.logprobs[0].logprob, abs=1e-4)
    prefill.release_prefilled("t2")
    assert prefill.blocks.num_used == decode.blocks.num_used == 0


def test_a_pulled_prompt_whose_handle_hashes_are_not_its_own_joins_no_cache(make_engine) -> None:
    """The prefill addresses its blocks in the default namespace, the decode serves the prompt in another: the
    decode keeps the tokens but caches none of the request's blocks, so nothing can find K/V under a false name."""
    prefill, decode = (make_engine(policy=policy, num_blocks=64, block_size=4) for policy in ("prefill", "decode"))
    tokens, _, _ = disagg_turn(prefill, decode, "t1", SYSTEM, namespace="tenant:b")
    assert decode.blocks.cached_hashes() == []
    assert not decode.vouched(SYSTEM, "tenant:b", block_hashes(SYSTEM, 4))
    assert disagg_turn(prefill, decode, "t2", SYSTEM)[0] == tokens
    assert set(block_hashes(SYSTEM, 4)) <= set(decode.blocks.cached_hashes())
