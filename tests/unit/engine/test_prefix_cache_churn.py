"""1,000 random requests with cancels on pools small enough to evict: at the end every block is free or cached
and none leaked; a prefilled request's blocks (held under a lease) are never evicted nor written."""

from __future__ import annotations

import random

import pytest
import torch

from services.common.sampling import SamplingParams
from services.engine.engine import LLMEngine

pytestmark = pytest.mark.slow
PREFIXES = [[1, *range(10 + 30 * i, 34 + 30 * i)] for i in range(4)]  # 25 tokens each: 6 full blocks of 4


def _prompt(rng: random.Random) -> list[int]:
    return rng.choice(PREFIXES)[: rng.randint(5, 25)] + [rng.randint(3, 250) for _ in range(rng.randint(0, 9))]


def _accounted(engine: LLMEngine) -> None:
    blocks = engine.blocks
    assert blocks.num_free + blocks.num_used == blocks.num_blocks
    assert blocks.num_cached <= blocks.num_free


def test_prefill_leases_survive_eviction_pressure_and_nothing_leaks(make_engine) -> None:
    engine = make_engine(policy="prefill", num_blocks=40, block_size=4, max_batch_tokens=64)
    rng = random.Random(7)
    leased: dict[str, tuple[list[int], torch.Tensor]] = {}  # request → its held blocks and their K/V then
    added = evicted = 0
    while added < 1000 or engine.has_work() or leased:
        for _ in range(rng.randint(0, 4)):
            if added < 1000:
                engine.add_request(f"p{added}", _prompt(rng), SamplingParams(max_tokens=4, ignore_eos=True))
                added += 1
        waiting = [s.request_id for s in engine.scheduler.waiting]
        if waiting and rng.random() < 0.2:
            assert engine.abort(rng.choice(waiting))  # cancelled in the queue
        for out in engine.step():
            if out.prefilled:
                leased[out.request_id] = (out.held_blocks, engine.runner.pool.tensor[out.held_blocks].clone())
        for rid in [r for r in leased if rng.random() < 0.3]:  # pulled, released or expired, in any order
            held, kv = leased.pop(rid)
            assert torch.equal(engine.runner.pool.tensor[held], kv), "a leased block was written while held"
            (engine.abort if rng.random() < 0.5 else engine.release_prefilled)(rid)
        _accounted(engine)
        evicted += sum(not stored for stored, _ in engine.blocks.take_events() or ())
    assert evicted > 100  # the pool was small enough to evict
    assert engine.blocks.num_used == 0 and engine.blocks.num_free == 40 and not engine.prefilled
    assert engine.scheduler.cache.hit > 0 and engine.blocks.num_cached > 0


def test_colocated_requests_cancelled_mid_decode_free_every_block_and_match_caching_off(make_engine) -> None:
    engine = make_engine(policy="colocated", num_blocks=24, block_size=4, max_batch_tokens=64)
    rng = random.Random(11)
    added, live = 0, set()
    asked: dict[str, tuple[list[int], SamplingParams]] = {}
    answers: dict[str, list[int]] = {}
    while added < 1000 or engine.has_work():
        for _ in range(rng.randint(0, 3)):
            if added < 1000:
                asked[f"c{added}"] = (_prompt(rng), SamplingParams(max_tokens=rng.randint(1, 8), temperature=0,
                                                                   ignore_eos=True))
                engine.add_request(f"c{added}", *asked[f"c{added}"])
                live.add(f"c{added}")
                added += 1
        if live and rng.random() < 0.25:
            rid = rng.choice(sorted(live))
            engine.abort(rid)
            live.discard(rid)
        for out in engine.step():
            answers.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finished:
                live.discard(out.request_id)
        _accounted(engine)
    assert engine.blocks.num_used == 0 and engine.blocks.num_free == 24
    assert engine.scheduler.cache.hit > 0
    done = [rid for rid, (_, params) in asked.items() if len(answers.get(rid, ())) == params.max_tokens]
    assert len(done) > 500  # those served to their end give the tokens an uncached engine gives
    cold = make_engine(policy="colocated", num_blocks=24, block_size=4, max_batch_tokens=64, prefix_caching="off")
    assert cold.generate([asked[r][0] for r in done], [asked[r][1] for r in done]) == [answers[r] for r in done]
