"""The one FCFS queue of KV-block reservations (`BlockQueue`), behind the engine's and the mock instances' pulls."""

from __future__ import annotations

import asyncio

from services.engine.block_manager import BlockManager
from services.engine.block_queue import BlockQueue


def _queue(blocks: int) -> tuple[BlockManager, BlockQueue]:
    pool = BlockManager(blocks, 4)
    return pool, BlockQueue(pool.try_allocate, pool.free)


async def test_a_reservation_waits_behind_earlier_ones_even_where_it_would_fit() -> None:
    pool, queue = _queue(8)
    held = await queue.reserve(6)
    large = asyncio.create_task(queue.reserve(4))
    small = asyncio.create_task(queue.reserve(1))
    await asyncio.sleep(0)
    assert not large.done() and not small.done() and pool.num_free == 2  # 1 would fit: it does not overtake
    assert queue.try_reserve(1) is None and queue
    pool.free(held)
    queue.grant()
    assert len(await large) == 4 and len(await small) == 1 and not queue


async def test_the_head_cancelled_lets_the_next_one_in_and_a_late_grant_goes_back() -> None:
    pool, queue = _queue(8)
    held = await queue.reserve(5)
    head = asyncio.create_task(queue.reserve(6))
    nxt = asyncio.create_task(queue.reserve(3))
    await asyncio.sleep(0)
    head.cancel()
    assert len(await nxt) == 3  # without a grant on leaving, it would wait for the next free
    late = asyncio.create_task(queue.reserve(2))
    await asyncio.sleep(0)
    pool.free(held[:2])
    queue.grant()  # its blocks are given ...
    late.cancel()  # ... and it is cancelled before it resumes
    await asyncio.gather(late, return_exceptions=True)
    assert late.cancelled() and pool.num_free == 2 and not queue  # the late grant went back into the pool
