"""Benchmark samples are the planner's lengths, scaled and clipped, with repeatable ids and arrivals."""

import numpy as np
import pytest

from services.bench.workload import BenchWorkload, scale_lengths


def test_scaling_keeps_minimums_and_the_context_limit():
    p, o = scale_lengths(np.array([10, 2000, 8]), np.array([1, 400, 40]), 0.25, 0.5, max_context=600)
    assert p.tolist() == [4, 500, 4]
    assert o.tolist() == [1, 100, 20]
    p, o = scale_lengths(np.array([2000]), np.array([2000]), 1.0, 1.0, max_context=2500)
    assert int(p[0] + o[0]) == 2500


def test_a_sample_is_repeatable_and_prompt_ids_match_the_lengths():
    a = BenchWorkload("chatbot", seed=3).sample(50, vocab=300)
    b = BenchWorkload("chatbot", seed=3).sample(50, vocab=300)
    assert a.prompt_ids == b.prompt_ids and (a.unit_arrivals == b.unit_arrivals).all()
    assert [len(ids) for ids in a.prompt_ids] == a.prompts.tolist()
    assert all(3 <= t < 300 for ids in a.prompt_ids for t in ids)
    assert (a.prompts + a.outputs <= 4096).all()


def test_the_head_of_a_sample_is_the_first_requests_and_rates_divide_arrivals():
    sample = BenchWorkload("code", cv=2.0).sample(40, vocab=300)
    head = sample.head(10)
    assert head.prompt_ids == sample.prompt_ids[:10]
    assert np.allclose(head.arrivals(4.0), sample.unit_arrivals[:10] / 4.0)


def test_a_point_takes_its_window_or_with_at_knee_every_requested_one():
    from services.bench.runner import BenchConfig, point_sample

    sample = BenchWorkload("chatbot").sample(200, vocab=300)
    windowed = point_sample(BenchConfig(model="m", num_requests=200, window_s=125.0), sample)
    assert [len(windowed(rate).prompts) for rate in (0.1, 0.6, 2.0)] == [30, 75, 200]
    fixed = point_sample(BenchConfig(model="m", num_requests=200, window_s=125.0, at_knee=(0.8, 1.0)), sample)
    assert [len(fixed(rate).prompts) for rate in (0.1, 0.6, 2.0)] == [200, 200, 200]


def test_each_turn_sends_the_previous_prompt_its_answer_and_a_new_message():
    sample = BenchWorkload("multi-turn", seed=4).sample(300, vocab=300)
    assert sample.turns[0] == 0 and len(sample.prompt_ids) == len(sample) == 300
    for i in np.flatnonzero(sample.turns > 0):
        assert sample.turns[i] == sample.turns[i - 1] + 1
        assert sample.prompts[i] == sample.prompts[i - 1] + sample.outputs[i - 1] + len(sample.prompt_ids[i])
        assert sample.unit_arrivals[i] == sample.unit_arrivals[i - 1] and sample.think_s[i] > 0
    firsts = sample.turns == 0
    assert (sample.think_s[firsts] == 0).all() and (sample.prompts[firsts] >= 64).all()  # each its system prompt
    lengths = np.diff([*np.flatnonzero(firsts), len(sample)])[:-1]  # the last conversation may be cut short
    assert lengths.min() >= 3 and lengths.max() <= 6
    assert 1.5 < sample.think_s[~firsts].mean() < 2.5  # exponential, 2 s by default
    # the rate counts requests: conversations come at the rate over the mean turns per conversation
    assert 0.8 < len(sample) / sample.unit_arrivals[-1] < 1.25
    assert (sample.prompts + sample.outputs <= 4096).all()


def test_a_conversation_ends_before_a_turn_that_would_pass_the_context():
    sample = BenchWorkload("multi-turn", max_context=300, seed=1).sample(200, vocab=300)
    assert (sample.prompts + sample.outputs <= 300).all()
    assert np.diff([*np.flatnonzero(sample.turns == 0), len(sample)]).min() < 3  # some were cut short


def test_the_conversations_of_a_run_group_the_turns_in_order():
    sample = BenchWorkload("multi-turn", think_s=0.5).sample(20, vocab=300)
    conversations = sample.conversations(2.0, "x")
    turns = [t for c in conversations for t in c.turns]
    assert [t.request_id for t in turns] == [f"x-{i}" for i in range(20)]
    assert [t.message_ids for t in turns] == list(sample.prompt_ids)
    assert [t.max_tokens for t in turns] == sample.outputs.tolist() and [t.think_s for t in turns] == sample.think_s.tolist()
    assert [c.arrival for c in conversations] == (sample.unit_arrivals[sample.turns == 0] / 2.0).tolist()
    single = BenchWorkload("chatbot").sample(5, vocab=300).conversations(1.0, "y")
    assert [len(c.turns) for c in single] == [1] * 5 and all(c.turns[0].think_s == 0 for c in single)


def test_shared_prompt_requests_begin_with_one_of_a_few_long_system_prompts():
    sample = BenchWorkload("shared-prompt", system_prompts=3).sample(60, vocab=300)
    shared = 256  # 1024 tokens at the default prompt scale
    assert len({ids[:shared] for ids in sample.prompt_ids}) == 3
    assert len({ids[shared:] for ids in sample.prompt_ids}) == 60  # each its own message
    assert [len(ids) for ids in sample.prompt_ids] == sample.prompts.tolist()
    assert (sample.prompts > shared).all() and (sample.turns == 0).all()


def test_the_modelled_hits_are_each_system_prompts_blocks_after_its_first_request():
    sample = BenchWorkload("shared-prompt", system_prompts=3).sample(60, vocab=300)
    cached = sample.cached_tokens(16)
    firsts = {ids[:256]: i for i, ids in reversed(list(enumerate(sample.prompt_ids)))}
    assert [int(cached[i]) for i in firsts.values()] == [0, 0, 0]
    assert all(cached[i] == 256 for i in range(60) if i not in firsts.values())  # the message's blocks are its own
    with pytest.raises(ValueError):
        BenchWorkload("multi-turn").sample(20, vocab=300).cached_tokens(16)
