"""Decode admission: block reservations wait FCFS, a cancelled waiter holds up no one, nothing leaks, and a
reservation does not wait for the engine's step to end."""

from __future__ import annotations

import asyncio
import threading

from services.engine.async_engine import AsyncEngine


async def test_reservations_are_fcfs_and_cancellation_frees_the_queue(make_engine) -> None:
    engine = AsyncEngine(make_engine(num_blocks=4, block_size=16))
    try:
        first = await engine.reserve_blocks(64)  # the whole pool
        assert len(first) == 4
        second = asyncio.create_task(engine.reserve_blocks(48))
        third = asyncio.create_task(engine.reserve_blocks(16))
        await asyncio.sleep(0.05)
        assert not second.done() and not third.done()  # FCFS: the small one does not overtake
        second.cancel()
        await asyncio.sleep(0.05)
        assert not third.done()  # still no free block
        engine.free_blocks(first)
        assert len(await asyncio.wait_for(third, 5)) == 1
        engine.free_blocks(third.result())
        assert await engine.call(lambda e: e.blocks.num_used) == 0
    finally:
        engine.stop()


async def test_a_reservation_does_not_wait_for_the_engine_thread(make_engine) -> None:
    engine = AsyncEngine(make_engine(num_blocks=4, block_size=16))
    busy = threading.Event()
    try:
        held = engine.thread.call(lambda e: busy.wait(10))  # the engine thread is mid-"step" until released
        blocks = await asyncio.wait_for(engine.reserve_blocks(40), 2)
        assert len(blocks) == 3 and not held.done()
        engine.free_blocks(blocks)
        assert engine.engine.blocks.num_used == 0
    finally:
        busy.set()
        engine.stop()
