"""The n choices of a request: distinct int64 seeds, choice 0 unchanged; their streams merged and closed."""

from __future__ import annotations

import asyncio

import pytest

from services.common.sampling import INT64_MAX, INT64_MIN, choice_seed
from services.router.choices import merge


@pytest.mark.parametrize("seed", [0, 1, INT64_MIN, INT64_MAX])
def test_choice_seeds_are_distinct_int64s(seed: int) -> None:
    seeds = [choice_seed(seed, i) for i in range(16)]
    assert seeds[0] == seed and len(set(seeds)) == 16
    assert all(INT64_MIN <= s <= INT64_MAX for s in seeds)


async def test_merge_yields_every_item_and_closes_all_streams_on_error() -> None:
    closed: list[int] = []

    async def stream(i: int, fail: bool = False):
        try:
            for k in range(3):
                await asyncio.sleep(0.001 * (i + 1))
                yield (i, k)
            await asyncio.sleep(0.05 if fail else 10)
            if fail:
                raise ValueError("boom")
        finally:
            closed.append(i)

    items = []
    with pytest.raises(ValueError, match="boom"):
        async for item in merge([stream(0), stream(1, fail=True), stream(2)]):
            items.append(item)
    assert sorted(items) == [(i, k) for i in range(3) for k in range(3)]
    assert sorted(closed) == [0, 1, 2]
