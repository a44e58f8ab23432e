"""Benchmark samples are the planner's lengths, scaled and clipped, with repeatable ids and arrivals."""

import numpy as np

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
