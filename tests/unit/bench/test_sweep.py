"""The rate search finds the crossing of the attainment target and measures no rate twice."""

from dataclasses import dataclass

import pytest

from services.bench.sweep import fixed_rates_goodput, goodput_search, pooled_runs, undecided


def _capacity(limit: float):
    measured: list[float] = []

    def measure(rate: float) -> float:
        measured.append(rate)
        return 1.0 if rate <= limit else 0.5

    return measure, measured


@pytest.mark.parametrize("start", [0.3, 1.0, 2.0, 7.0])
def test_goodput_is_the_highest_passing_rate_within_the_bisection_resolution(start):
    measure, measured = _capacity(2.5)
    found = goodput_search(measure, start, 0.9, factor=1.5, bisect_steps=4)
    # The bracket [lo, 1.5·lo] around the limit is halved four times.
    assert 2.5 - 0.5 * 2.5 / 2**4 <= found <= 2.5
    assert len(measured) == len(set(measured))


def test_bisection_narrows_the_bracket_by_half_each_step():
    measure, measured = _capacity(2.5)
    goodput_search(measure, 1.0, 0.9, factor=2.0, bisect_steps=3)
    assert measured == [1.0, 2.0, 4.0, 3.0, 2.5, 2.75]


def test_nothing_passes_gives_zero_after_the_allowed_steps():
    measure, measured = _capacity(0.0)
    assert goodput_search(measure, 1.0, 0.9, factor=2.0, max_steps=3) == 0.0
    assert measured == [1.0, 0.5, 0.25, 0.125]


def test_everything_passes_stops_at_the_last_step():
    measure, measured = _capacity(float("inf"))
    assert goodput_search(measure, 1.0, 0.9, factor=2.0, max_steps=3) == 8.0
    assert measured == [1.0, 2.0, 4.0, 8.0]


def test_the_target_is_inclusive():
    assert goodput_search(lambda rate: 0.9 if rate <= 1.0 else 0.0, 1.0, 0.9, factor=2.0, bisect_steps=0) == 1.0


def test_fixed_rates_are_each_measured_once_lowest_first_and_the_highest_passing_wins():
    measure, measured = _capacity(2.5)
    assert fixed_rates_goodput(measure, [3.0, 2.0, 2.4], 0.9) == 2.4
    assert measured == [2.0, 2.4, 3.0]
    assert fixed_rates_goodput(_capacity(1.0)[0], [2.0, 3.0], 0.9) == 0.0


@dataclass
class _Judged:
    attainment: float
    attainment_se: float
    requests: int


def _runs(outcomes: list[list[bool]]):
    """A rate whose i-th run meets the objectives for outcomes[i] (True: met); judged on the pooled results."""
    calls: list[int] = []

    def run(i: int) -> list[bool]:
        calls.append(i)
        return outcomes[i]

    def judge(results: list[bool]) -> _Judged:
        a = sum(results) / len(results)
        return _Judged(a, (a * (1 - a) / len(results)) ** 0.5, len(results))

    return run, judge, calls


def test_a_decided_rate_runs_once():
    run, judge, calls = _runs([[True] * 19 + [False]] * 3 + [[True] * 20])
    judged, runs = pooled_runs(run, judge, 0.5, repeats=3, within=2.0)  # 0.95 ± 0.05: far above 0.5
    assert (runs, calls, judged.requests) == (1, [0], 20)
    assert pooled_runs(*_runs([[True] * 20] * 3)[:2], 0.9, repeats=3, within=2.0)[1] == 1  # no spread: decided


def test_an_undecided_rate_runs_again_and_is_judged_on_all_its_runs():
    run, judge, calls = _runs([[True] * 17 + [False] * 3, [True] * 19 + [False], [True] * 20])
    judged, runs = pooled_runs(run, judge, 0.9, repeats=3, within=2.0)
    # 0.85 ± 0.08 is undecided; pooled with 0.95 it is 0.90 ± 0.047, still undecided; the third run is the last.
    assert (runs, calls, judged.requests) == (3, [0, 1, 2], 60)
    assert pooled_runs(*_runs([[True] * 17 + [False] * 3] * 5)[:2], 0.9, repeats=2, within=2.0)[1] == 2


def test_undecided_is_within_the_given_standard_errors():
    assert undecided(0.88, 0.02, 0.9, 2.0) and not undecided(0.85, 0.02, 0.9, 2.0)
    assert not undecided(1.0, 0.0, 0.9, 2.0)
