"""The prefix-cache index in Redis: which block hashes each instance's pool holds.

An instance publishes what its block manager registered and evicted since its last beat, numbered: a batch
applies only on top of the one before it (same incarnation, previous number), so a lost batch, an instance
restart or a Redis restart shows as a refused batch, and the instance then rewrites its whole set (a resync;
also every RESYNC_S). Every key lives `ttl` past the last beat: a dead instance's entries are gone with its
registration. A router asks, per instance, how many of a prompt's leading blocks it holds. A stale entry costs
a recompute, never a wrong token: the engine looks its own blocks up again.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from services.common.prefix_hash import from_wire, to_wire

CACHE_KEY = "ds:cache:{}"  # instance id → set of block hashes (32 bytes each, as KV handles carry them)
CACHE_SEQ_KEY = "ds:cache:{}:seq"  # instance id → "incarnation:number" of the last batch applied

# KEYS[1] = the set, KEYS[2] = its batch number; ARGV = incarnation, number, ttl ms, count of adds, adds..., removes...
_APPLY = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. (tonumber(ARGV[2]) - 1) then return 0 end
local adds = tonumber(ARGV[4])
for i = 5, 4 + adds do redis.call('SADD', KEYS[1], ARGV[i]) end
for i = 5 + adds, #ARGV do redis.call('SREM', KEYS[1], ARGV[i]) end
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""


class CacheIndex:
    def __init__(self, client: aioredis.Redis, ttl_ms: int) -> None:
        self.redis = client
        self.ttl_ms = ttl_ms
        self._apply = client.register_script(_APPLY)

    async def apply(self, instance_id: str, incarnation: str, number: int, stored: Iterable[int],
                    removed: Iterable[int]) -> bool:
        """Applies batch `number` (renewing the keys); False when the index does not hold batch `number - 1` of this
        incarnation: the caller resyncs."""
        adds, removes = to_wire(stored), to_wire(removed)
        return bool(await self._apply(keys=[CACHE_KEY.format(instance_id), CACHE_SEQ_KEY.format(instance_id)],
                                      args=[incarnation, number, self.ttl_ms, len(adds), *adds, *removes]))

    async def resync(self, instance_id: str, incarnation: str, number: int, hashes: list[int]) -> None:
        """Replaces the instance's set with `hashes`, as batch `number`."""
        key = CACHE_KEY.format(instance_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            for i in range(0, len(hashes), 4096):
                pipe.sadd(key, *to_wire(hashes[i:i + 4096]))
            pipe.pexpire(key, self.ttl_ms)
            pipe.set(CACHE_SEQ_KEY.format(instance_id), f"{incarnation}:{number}", px=self.ttl_ms)
            await pipe.execute()

    async def drop(self, instance_id: str) -> None:
        await self.redis.delete(CACHE_KEY.format(instance_id), CACHE_SEQ_KEY.format(instance_id))

    async def held_prefix(self, instance_ids: list[str], hashes: list[int]) -> dict[str, int]:
        """For each instance, how many of the leading `hashes` (a prompt's full blocks, in order) its pool holds."""
        if not hashes or not instance_ids:
            return dict.fromkeys(instance_ids, 0)
        members = to_wire(hashes)
        async with self.redis.pipeline(transaction=False) as pipe:
            for instance_id in instance_ids:
                pipe.smismember(CACHE_KEY.format(instance_id), members)
            found = await pipe.execute()
        return {i: _leading(flags) for i, flags in zip(instance_ids, found)}

    async def hashes(self, instance_id: str) -> set[int]:
        """The instance's whole set (tests, diagnostics)."""
        return set(from_wire(await self.redis.smembers(CACHE_KEY.format(instance_id))))


def _leading(flags: list[int]) -> int:
    for i, flag in enumerate(flags):
        if not flag:
            return i
    return len(flags)
