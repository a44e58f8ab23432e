"""Recording a profile over the batch grid, and fitting the latency model to what was recorded."""

import pytest

from services.common.step_model.profile_fit import fit_profile
from services.planner.profiler import decode_grid, prefill_grid, record_profile
from services.planner.shapes import PRESETS


def test_grid_stays_within_the_context_and_the_token_budget():
    pre, dec = prefill_grid(512, 1024), decode_grid(512, 1024)
    assert all(max(b) < 512 and sum(b) <= 1024 for b in pre + dec)
    assert len({len(b) for b in pre}) > 1 and len({sum(x * x for x in b) / sum(b) for b in pre}) > 3


def test_recorded_profile_fits_the_timer_it_measured():
    calls = []

    def prefill(lens):  # a device whose prefill costs 1 ms + 2 µs per token
        calls.append(lens)
        return 1e-3 + 2e-6 * sum(lens)

    profile = record_profile(PRESETS["tiny-llama"], "cpu:0", prefill, lambda lens: 5e-4 + 1e-7 * sum(lens),
                             repeats=3)
    assert len(calls) == 4 * len(profile.prefill)  # a warm-up and three repeats per shape
    coeffs = fit_profile(profile).at(1)
    assert coeffs.prefill.per_token == pytest.approx(2e-6, rel=1e-6)
    assert coeffs.decode_small.c0 == pytest.approx(5e-4, rel=1e-6)



def test_each_repeat_is_the_best_of_its_runs_so_a_burst_of_other_work_is_left_out():
    runs = iter(range(10**6))

    def bursty(lens):  # every other run lands in a burst of other work: ten times as long
        return 1e-3 * sum(lens) * (10 if next(runs) % 2 else 1)

    profile = record_profile(PRESETS["tiny-llama"], "cpu:0", bursty, bursty, repeats=3, best_of=2)
    assert all(p.seconds == pytest.approx(1e-3 * sum(p.prompt_lens)) for p in profile.prefill)
