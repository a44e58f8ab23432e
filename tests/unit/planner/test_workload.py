"""Synthetic workloads reproduce the statistics docs/planner.md documents; arrivals have the asked rate and CV."""

import numpy as np
import pytest

from services.planner.workload import Workload, length_stats, unit_arrivals


@pytest.mark.parametrize("name, prompt_mean, prompt_p50, output_mean, output_p50", [
    ("chatbot", 850, 790, 90, 39),  # ShareGPT as the DistServe authors recorded it: 867 / 814 / 100 / 36
    ("code", 124, 110, 55, 43),  # HumanEval prompts / canonical solutions: 124 / 110 / 55 / 45
    ("summarization", 1914, 1938, 103, 64),  # LongBench as the authors truncated it (prompt 1900..2048)
])
def test_synthetic_length_statistics(name, prompt_mean, prompt_p50, output_mean, output_p50):
    prompts, outputs = Workload(name).sample(20000, np.random.default_rng(1))
    stats = length_stats(prompts, outputs)
    assert stats["prompt_mean"] == pytest.approx(prompt_mean, rel=0.06)
    assert stats["prompt_p50"] == pytest.approx(prompt_p50, rel=0.08)
    assert stats["output_mean"] == pytest.approx(output_mean, rel=0.1)
    assert stats["output_p50"] == pytest.approx(output_p50, rel=0.1)
    assert (prompts + outputs).max() < 2048 and prompts.min() >= 4 and outputs.min() >= 1


def test_fixed_and_recorded_lengths():
    p, o = Workload("fixed", input_len=100, output_len=7).sample(5, np.random.default_rng(0))
    assert p.tolist() == [100] * 5 and o.tolist() == [7] * 5
    p, o = Workload("recorded", recorded=((10, 1), (20, 2))).sample(1000, np.random.default_rng(0))
    assert set(zip(p.tolist(), o.tolist())) == {(10, 1), (20, 2)}


@pytest.mark.parametrize("cv", [1.0, 2.0, 0.5])
def test_arrivals_have_rate_one_and_the_asked_cv(cv):
    times = unit_arrivals(100000, np.random.default_rng(0), cv)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
