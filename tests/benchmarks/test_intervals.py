"""Paired ratios and their bootstrap interval (benchmarks/intervals.py)."""

import random

import pytest

from benchmarks.intervals import paired_difference, paired_ratio


def test_a_constant_ratio_has_a_zero_width_interval():
    off = [1.0, 2.0, 4.0, 8.0]
    ratio = paired_ratio(off, [1.05 * x for x in off])
    assert ratio.median == pytest.approx(1.05) and ratio.low == pytest.approx(1.05) and ratio.high == pytest.approx(1.05)


def test_pairing_removes_load_that_hits_both_sides_of_a_round():
    rng = random.Random(1)
    load = [rng.uniform(1.0, 3.0) for _ in range(30)]  # rounds three times slower than others
    off = [x * rng.uniform(0.99, 1.01) for x in load]
    on = [1.03 * x * rng.uniform(0.99, 1.01) for x in load]
    ratio = paired_ratio(off, on)
    assert 1.01 < ratio.low <= ratio.median <= ratio.high < 1.05


def test_few_noisy_rounds_give_an_interval_that_does_not_resolve_five_percent():
    rng = random.Random(2)
    off = [rng.uniform(0.8, 1.2) for _ in range(6)]
    on = [rng.uniform(0.8, 1.2) for _ in range(6)]
    ratio = paired_ratio(off, on)
    assert ratio.low < 0.95 or ratio.high > 1.05
    assert ratio.low <= ratio.median <= ratio.high


def test_unpaired_rounds_are_refused():
    with pytest.raises(ValueError, match="paired"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="paired"):
        paired_ratio([], [])


def test_a_paired_difference_keeps_the_unit_and_the_sign():
    off = [10.0, 11.0, 12.0, 10.5]
    on = [x - 0.5 for x in off]
    gap = paired_difference(off, on)
    assert gap.median == pytest.approx(-0.5) and gap.low == pytest.approx(-0.5) and gap.high == pytest.approx(-0.5)
    assert gap.text(scale=1e3, digits=0) == "-500 [-500, -500]"
