"""Blocks a cancelled pull was copying into go back only once kvxfer has aborted the copy."""

from __future__ import annotations

import asyncio

from services.engine.async_engine import AsyncEngine

ABANDONED_COPY_GRACE_S = 1.0  # kvxfer aborts an abandoned copy within milliseconds


def free_after_copy(engine: AsyncEngine, blocks: list[int]) -> None:
    """Frees the destination blocks of a cancelled pull after the grace, so that a copy still landing cannot
    overwrite another request's K/V."""
    asyncio.get_running_loop().call_later(ABANDONED_COPY_GRACE_S, engine.free_blocks, blocks)
