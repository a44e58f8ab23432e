"""The prefix-cache index in Redis: which block hashes each instance's pool holds, and the stream of its changes.

An instance publishes what its block manager registered and evicted since its last beat, numbered: a batch
applies only on top of the one before it (same incarnation, previous number), so a lost batch, an instance
restart or a Redis restart shows as a refused batch, and the instance then rewrites its whole set (a resync,
never on a timer). A beat with nothing new only renews the keys. Every applied batch and every resync is also
appended to one capped stream (`ds:cache:events`): routers keep the index in memory from it
(`services/router/block_index.py`) and read a set itself only when they start or missed a batch. Every key lives
`ttl` past the last beat: a dead instance's entries are gone with its registration. A stale entry costs a
recompute, never a wrong token: the engine looks its own blocks up again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis

from services.common.prefix_hash import HASH_BYTES, from_wire, to_wire

CACHE_KEY = "ds:cache:{}"  # instance id → set of block hashes (32 bytes each, as KV handles carry them)
CACHE_SEQ_KEY = "ds:cache:{}:seq"  # instance id → "incarnation:number" of the last batch applied
EVENTS_KEY = "ds:cache:events"  # stream of batches: i = instance, n = "incarnation:number", f = "1" for a whole set,
# a = hashes added (concatenated, 32 bytes each), r = removed
EVENTS_MAXLEN = 8192  # batches kept; a router further behind reads the sets it missed a batch of

# KEYS = the set, its batch number, the stream; ARGV = incarnation, number, ttl ms, count of adds, instance id,
# stream cap, adds..., removes... Returns 0: refused (resync); 1: applied; 2: nothing new, the keys renewed.
_APPLY = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. (tonumber(ARGV[2]) - 1) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if #ARGV == 6 then return 2 end
local adds = tonumber(ARGV[4])
local added, removed = {}, {}
for i = 7, 6 + adds do redis.call('SADD', KEYS[1], ARGV[i]); added[#added + 1] = ARGV[i] end
for i = 7 + adds, #ARGV do redis.call('SREM', KEYS[1], ARGV[i]); removed[#removed + 1] = ARGV[i] end
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'i', ARGV[5], 'n', ARGV[1] .. ':' .. ARGV[2], 'f', '0',
           'a', table.concat(added), 'r', table.concat(removed))
return 1
"""


@dataclass(frozen=True, slots=True)
class Batch:
    """One instance's change to its set, as the stream carries it."""

    instance_id: str
    incarnation: str
    number: int
    whole: bool  # the whole set (a resync): `added` replaces what the instance held
    added: list[int]
    removed: list[int]


@dataclass(frozen=True, slots=True)
class HeldSet:
    """An instance's whole set as Redis holds it, and the batch it is as of ("" incarnation: no set)."""

    incarnation: str
    number: int
    hashes: list[int]


def _hashes(joined: bytes) -> list[int]:
    return from_wire([joined[i:i + HASH_BYTES] for i in range(0, len(joined), HASH_BYTES)])


def _seq(raw: bytes | None) -> tuple[str, int]:
    if not raw:
        return "", 0
    incarnation, number = raw.decode().rsplit(":", 1)
    return incarnation, int(number)


class CacheIndex:
    def __init__(self, client: aioredis.Redis, ttl_ms: int) -> None:
        self.redis = client
        self.ttl_ms = ttl_ms
        self._apply = client.register_script(_APPLY)

    async def apply(self, instance_id: str, incarnation: str, number: int, stored: Iterable[int],
                    removed: Iterable[int]) -> int:
        """Applies batch `number` (renewing the keys): 1; 2 when it is empty (the number stays unused); 0 when the
        index does not hold batch `number - 1` of this incarnation: the caller resyncs."""
        adds, removes = to_wire(stored), to_wire(removed)
        return int(await self._apply(
            keys=[CACHE_KEY.format(instance_id), CACHE_SEQ_KEY.format(instance_id), EVENTS_KEY],
            args=[incarnation, number, self.ttl_ms, len(adds), instance_id, EVENTS_MAXLEN, *adds, *removes]))

    async def resync(self, instance_id: str, incarnation: str, number: int, hashes: list[int]) -> None:
        """Replaces the instance's set with `hashes`, as batch `number`."""
        key = CACHE_KEY.format(instance_id)
        members = to_wire(hashes)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            for i in range(0, len(members), 4096):
                pipe.sadd(key, *members[i:i + 4096])
            pipe.pexpire(key, self.ttl_ms)
            pipe.set(CACHE_SEQ_KEY.format(instance_id), f"{incarnation}:{number}", px=self.ttl_ms)
            pipe.xadd(EVENTS_KEY, {"i": instance_id, "n": f"{incarnation}:{number}", "f": "1", "a": b"".join(members),
                                   "r": ""}, maxlen=EVENTS_MAXLEN, approximate=True)
            await pipe.execute()

    async def drop(self, instance_id: str) -> None:
        await self.redis.delete(CACHE_KEY.format(instance_id), CACHE_SEQ_KEY.format(instance_id))

    async def batches(self, after: str, count: int) -> tuple[str, list[Batch]]:
        """Up to `count` batches after stream id `after` ("0": from the oldest kept), and the id of the last."""
        found = await self.redis.xread({EVENTS_KEY: after}, count=count)
        entries = found[0][1] if found else []
        batches = []
        for _, fields in entries:
            incarnation, number = _seq(fields[b"n"])
            batches.append(Batch(fields[b"i"].decode(), incarnation, number, fields[b"f"] == b"1",
                                 _hashes(fields[b"a"]), _hashes(fields[b"r"])))
        return (entries[-1][0].decode() if entries else after), batches

    async def last_batch_id(self) -> str:
        """The stream id of the newest batch ("0" when none): where a reader that read every set goes on from."""
        newest = await self.redis.xrevrange(EVENTS_KEY, count=1)
        return newest[0][0].decode() if newest else "0"

    async def held_sets(self, instance_ids: list[str]) -> dict[str, HeldSet]:
        """Each instance's whole set with the batch it is as of, each read atomically, in one round trip."""
        async with self.redis.pipeline(transaction=True) as pipe:
            for instance_id in instance_ids:
                pipe.get(CACHE_SEQ_KEY.format(instance_id))
                pipe.smembers(CACHE_KEY.format(instance_id))
            found = await pipe.execute()
        sets = {}
        for k, instance_id in enumerate(instance_ids):
            incarnation, number = _seq(found[2 * k])
            sets[instance_id] = HeldSet(incarnation, number, from_wire(found[2 * k + 1]))
        return sets

    async def hashes(self, instance_id: str) -> set[int]:
        """The instance's whole set (tests, diagnostics)."""
        return set(from_wire(await self.redis.smembers(CACHE_KEY.format(instance_id))))
