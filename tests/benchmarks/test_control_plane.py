"""The scale benchmark's arithmetic: quantiles from the growth of routers' histograms, and prompts whose prefixes
are shared within a phase and not across phases."""

from __future__ import annotations

import math

from benchmarks.control_plane import PREFIX_TOKENS, PREFIXES, prompts, quantile


def _scrape(counts: dict[str, float]) -> dict[str, float]:
    return {f"le:{edge}": n for edge, n in counts.items()}


def test_quantiles_interpolate_within_the_buckets_of_every_routers_growth() -> None:
    before = [_scrape({"0.001": 5, "0.01": 5, "+Inf": 5}), _scrape({"0.001": 0, "0.01": 0, "+Inf": 0})]
    # 100 new observations: 50 under 1 ms (router 1), 50 between 1 and 10 ms (router 2)
    after = [_scrape({"0.001": 55, "0.01": 55, "+Inf": 55}), _scrape({"0.001": 0, "0.01": 50, "+Inf": 50})]
    assert math.isclose(quantile(before, after, 0.5), 1.0)
    assert math.isclose(quantile(before, after, 0.99), 1.0 + 9.0 * 49 / 50)
    assert math.isnan(quantile(after, after, 0.5))


def test_prompts_share_prefixes_within_a_phase_only() -> None:
    first, second = prompts(259, 64, 0), prompts(259, 64, 1)
    assert len({tuple(p[:PREFIX_TOKENS]) for p in first}) == PREFIXES
    assert len({tuple(p) for p in first}) == 64
    assert not {tuple(p[:PREFIX_TOKENS]) for p in first} & {tuple(p[:PREFIX_TOKENS]) for p in second}
    assert all(0 < t < 259 for p in first + second for t in p)
