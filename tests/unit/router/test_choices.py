"""The n choices of a request: distinct int64 seeds, choice 0 unchanged; their streams merged and closed; one
shared colocated call read per choice."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from distserve.v1 import worker_pb2
from services.common.sampling import INT64_MAX, INT64_MIN, choice_seed
from services.router.choices import SharedStream, merge


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


async def test_a_shared_call_gives_each_choice_its_chunks_and_closes_when_all_are_done() -> None:
    opened, closed = [], []

    async def call():
        opened.append(1)
        try:
            for k in range(3):
                for i in range(2):
                    yield worker_pb2.TokenChunk(token_ids=[10 * i + k], index=i, finish_reason="length" if k == 2 else "")
            await asyncio.sleep(10)  # a call that stays open: the readers close it
        finally:
            closed.append(1)

    ended: list[int] = []
    shared = SharedStream(2, call, _record(ended))

    async def read(i: int) -> list[int]:
        return [c.token_ids[0] async for c in shared.choice(i)]

    got = await asyncio.gather(read(0), read(1))
    assert got == [[0, 1, 2], [10, 11, 12]] and opened == [1] and closed == [1] and ended == []


def _record(ended: list[int]):
    async def end(index: int) -> None:
        ended.append(index)
    return end


async def test_a_choice_stopped_early_is_ended_on_the_instance_one_that_leaves_is_not() -> None:
    async def call():
        for k in range(3):
            for i in range(3):
                yield worker_pb2.TokenChunk(token_ids=[10 * i + k], index=i, finish_reason="length" if k == 2 else "")

    ended: list[int] = []
    shared = SharedStream(3, call, _record(ended))

    async def read(i: int, leave_after: int, stop: bool) -> list[int]:
        got = []
        async with aclosing(shared.choice(i)) as chunks:
            async for c in chunks:
                got.append(c.token_ids[0])
                if len(got) == leave_after:
                    if stop:  # the router found a stop string
                        await shared.stop(i)
                    break  # else: the client left
        return got

    assert await asyncio.gather(read(0, 1, stop=True), read(1, 1, stop=False), read(2, 3, stop=False)) == \
        [[0], [10], [20, 21, 22]]
    assert ended == [0]  # the stopped choice alone: one that just stops reading ends with the call


async def test_the_last_reader_to_stop_closes_the_call_without_ending_its_choice() -> None:
    async def call():
        for k in range(3):
            yield worker_pb2.TokenChunk(token_ids=[k], index=0)

    ended: list[int] = []
    shared = SharedStream(1, call, _record(ended))
    async with aclosing(shared.choice(0)) as chunks:
        async for _ in chunks:
            await shared.stop(0)
            break
    assert ended == []


async def test_a_failed_shared_call_fails_every_choice() -> None:
    async def call():
        yield worker_pb2.TokenChunk(token_ids=[1], index=1)
        raise ValueError("instance gone")

    shared = SharedStream(2, call, _record([]))

    async def read(i: int) -> list[int]:
        return [t async for c in shared.choice(i) for t in c.token_ids]

    results = await asyncio.gather(read(0), read(1), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)
