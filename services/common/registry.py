"""The instance registry and load book in Redis (docs/architecture.md §6).

- `ds:inst:{id}`: an instance's JSON descriptor, with a TTL its heartbeat refreshes (lapsed = dead).
- `ds:known:{id}`: the same heartbeat with a long TTL: an instance whose descriptor lapsed only for a while (a
  stalled loop) keeps the load booked on it; one gone that long is dropped from the load book.
- `ds:load:{role}`: sorted set of instance ids by load (pending prefill tokens; decode KV tokens).
  The router picks the least-loaded live instance and adds the request's load in one Lua call, so
  several routers do not herd onto the same instance.
- `ds:booked:{router}`: what one router booked, so that another takes it off when that router's presence
  (`ds:router:{router}`, a TTL its beat refreshes) lapses.
- `ds:requests`: a capped stream of request records for the planner's workload profiler.
- `ds:crash:{id}/{incarnation}`: the request ids in the step a dead instance process died in (common/step_journal.py).
- `ds:model`: the latency model the planner fits online to the served steps (JSON; `services/planner/online_fit.py`).
- `ds:plan`: the current placement the planner stored (JSON; `services/planner/replan.py`).

This module is the only code that knows these keys: `Registry` for the asyncio services, and the functions at
the end for synchronous callers (the planner's REST handlers and replanning, the bench, the supervisor).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass

import redis
import redis.asyncio as aioredis

from services.common.redis_auth import resolve_url, tls_options
from services.common.redis_breaker import Breaker, GuardedConnection, GuardedPool, GuardedSSLConnection
from services.common.registry_cache import CacheIndex

INST_KEY = "ds:inst:{}"
LOAD_KEY = "ds:load:{}"
REQUESTS_STREAM = "ds:requests"
EPOCH_KEY = "ds:epoch"
ROUTER_KEY = "ds:router:{}"
BOOKED_KEY = "ds:booked:{}"  # one router's own bookings: "role|id" → load
REQUESTS_MAXLEN = 100_000
MODEL_KEY = "ds:model"
PLAN_KEY = "ds:plan"
CRASH_KEY = "ds:crash:{}"  # InstanceInfo.key → JSON list of the request ids in the step its process died in
CRASH_TTL_S = 60
KNOWN_KEY = "ds:known:{}"
FORGET_S = 60  # an instance silent this long leaves the load book

# KEYS[1] = load zset, KEYS[2] = the booking router's own book; ARGV[1] = load to add, ARGV[2] = role.
# Returns the chosen live id; skips lapsed ids and drops those silent past FORGET_S on the way. Reads the set 16
# ids at a time from the least loaded: a pick costs the same whatever the number of instances.
_PICK = """
local start = 0
while true do
  local ids = redis.call('ZRANGE', KEYS[1], start, start + 15)
  if #ids == 0 then return false end
  for _, id in ipairs(ids) do
    if redis.call('EXISTS', 'ds:inst:' .. id) == 1 then
      redis.call('ZINCRBY', KEYS[1], ARGV[1], id)
      redis.call('HINCRBYFLOAT', KEYS[2], ARGV[2] .. '|' .. id, ARGV[1])
      return id
    end
    if redis.call('EXISTS', 'ds:known:' .. id) == 0 then
      redis.call('ZREM', KEYS[1], id)
      start = start - 1
    end
  end
  start = start + 16
end
"""
# KEYS[1] = load zset, KEYS[2] = the router's own book; ARGV[1] = load to add, ARGV[2] = role, ARGV[3] = id.
_ADD = """
redis.call('ZINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('HINCRBYFLOAT', KEYS[2], ARGV[2] .. '|' .. ARGV[3], ARGV[1])
"""
# KEYS[1] = a router's own book, KEYS[2] = its presence key; ARGV[1] = 1 to drop it even while present.
# Takes what that router booked off the load book, once (a second caller finds the book gone).
_RECLAIM = """
if ARGV[1] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local kv = redis.call('HGETALL', KEYS[1])
for i = 1, #kv, 2 do
  local sep = string.find(kv[i], '|', 1, true)
  local zset = 'ds:load:' .. string.sub(kv[i], 1, sep - 1)
  local id = string.sub(kv[i], sep + 1)
  if redis.call('ZSCORE', zset, id) then redis.call('ZINCRBY', zset, -tonumber(kv[i + 1]), id) end
end
redis.call('DEL', KEYS[1])
return #kv / 2
"""


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    id: str
    role: str        # prefill | decode | colocated
    address: str     # gRPC host:port
    host: str        # host name; instances on one host share a kvxfer
    device: str
    kvxfer: str = ""  # gRPC address of this host's kvxfer
    incarnation: str = ""  # new at each process start: a restarted instance (same id) is not the one that failed
    journaled: bool = False  # keeps a step journal that its supervisor publishes at CRASH_KEY when it dies
    block_size: int = 0  # tokens per KV block: what its prefix-cache hashes cover (0: no prefix cache)
    block_bytes: int = 0  # bytes of one KV block, every layer (what a pull of a block moves; 0: unknown)

    @property
    def key(self) -> str:
        """One process of this instance: what a failure marks."""
        return f"{self.id}/{self.incarnation}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> InstanceInfo:
        return cls(**json.loads(raw))


@dataclass(frozen=True, slots=True)
class RouterBeat:
    alone: bool  # no other router is present: this one's bookings are all there are
    lapsed: bool  # this router's presence had lapsed (or it is new): another router may have taken its bookings off


class Registry:
    def __init__(self, client: aioredis.Redis, ttl_s: float = 3.0, breaker: Breaker | None = None) -> None:
        self.redis = client
        self.breaker = breaker
        self._parsed: dict[bytes, InstanceInfo] = {}  # descriptor as read → parsed
        self.ttl_ms = int(ttl_s * 1000)
        self._pick = client.register_script(_PICK)
        self._add = client.register_script(_ADD)
        self._reclaim = client.register_script(_RECLAIM)
        self.cache = CacheIndex(client, self.ttl_ms)  # the instances' prefix-cache block hashes

    @classmethod
    def from_url(cls, url: str, ttl_s: float = 3.0, max_connections: int = 64, pool_wait_s: float = 5.0,
                 breaker: Breaker | None = None) -> Registry:
        """A client whose calls wait (up to `pool_wait_s`) for one of `max_connections` connections: a burst of
        requests queues for a connection instead of failing (the default pool raises past its size). With a
        `breaker`, calls on a request's path fail at once while Redis is away (`common/redis_breaker.py`)."""
        guard = {} if breaker is None else {
            "breaker": breaker,
            "connection_class": GuardedSSLConnection if url.startswith("rediss:") else GuardedConnection}
        pool = (aioredis.BlockingConnectionPool if breaker is None else GuardedPool).from_url(
            resolve_url(url), **tls_options(url), max_connections=max_connections, timeout=pool_wait_s,
            socket_timeout=2.0, socket_connect_timeout=2.0, **guard)
        return cls(aioredis.Redis.from_pool(pool), ttl_s, breaker)

    @property
    def away(self) -> bool:
        """Redis is known to be away (its breaker open and the outage logged): a failure then is no news."""
        return self.breaker is not None and self.breaker.open

    async def register(self, info: InstanceInfo) -> None:
        """Announces an instance, with zero load when new; a restarted one keeps the load routers booked on it,
        since they take it off as their requests end."""
        await self.heartbeat(info)

    async def router_beat(self, router_id: str) -> RouterBeat:
        """Renews a router's presence."""
        others = [k async for k in self.redis.scan_iter(match=ROUTER_KEY.format("*"), count=1000)
                  if k.decode() != ROUTER_KEY.format(router_id)]
        was = await self.redis.set(ROUTER_KEY.format(router_id), "1", px=self.ttl_ms, get=True)
        return RouterBeat(alone=not others, lapsed=was is None)

    async def reset_load(self) -> None:
        """Every instance's booked load to zero (a sole router starting: no booking is in flight)."""
        async for key in self.redis.scan_iter(match=LOAD_KEY.format("*"), count=1000):
            members = await self.redis.zrange(key, 0, -1)
            if members:
                await self.redis.zadd(key, {m: 0 for m in members}, xx=True)
        async for key in self.redis.scan_iter(match=BOOKED_KEY.format("*"), count=1000):
            await self.redis.delete(key)

    async def reclaim(self, router_id: str, force: bool = False) -> int:
        """Takes the load `router_id` booked off the book when its presence lapsed (a router that died), or
        at once with `force` (the router itself, restarted: nothing of it is in flight). Returns the entries."""
        return int(await self._reclaim(keys=[BOOKED_KEY.format(router_id), ROUTER_KEY.format(router_id)],
                                       args=["1" if force else "0"]))

    async def reclaim_dead_routers(self) -> int:
        """Takes off the bookings of every router whose presence lapsed."""
        prefix = BOOKED_KEY.format("")
        found = [k.decode()[len(prefix):] async for k in self.redis.scan_iter(match=BOOKED_KEY.format("*"), count=1000)]
        return sum([await self.reclaim(router_id) for router_id in found])

    async def heartbeat(self, info: InstanceInfo) -> None:
        """Renews the instance; puts it back in the load book (at zero) after Redis restarted empty."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(INST_KEY.format(info.id), info.to_json(), px=self.ttl_ms)
            pipe.set(KNOWN_KEY.format(info.id), "1", px=FORGET_S * 1000)
            pipe.zadd(LOAD_KEY.format(info.role), {info.id: 0}, nx=True)
            await pipe.execute()

    async def epoch(self) -> str:
        """Names this Redis's data: a new name once Redis restarted empty (so routers book their loads again)."""
        await self.redis.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
        return (await self.redis.get(EPOCH_KEY) or b"").decode()

    async def deregister(self, info: InstanceInfo) -> None:
        await self.redis.delete(INST_KEY.format(info.id), KNOWN_KEY.format(info.id))
        await self.cache.drop(info.id)
        await self.redis.zrem(LOAD_KEY.format(info.role), info.id)

    async def instances(self) -> list[InstanceInfo]:
        """Every registered instance (a descriptor unchanged since the last call is not parsed again)."""
        keys = [key async for key in self.redis.scan_iter(match=INST_KEY.format("*"), count=1000)]
        values = await self.redis.mget(keys) if keys else []
        self._parsed = {v: self._parsed.get(v) or InstanceInfo.from_json(v) for v in values if v is not None}
        return list(self._parsed.values())

    async def pick(self, role: str, load: float, router_id: str = "") -> str | None:
        """The least-loaded live instance of a role, with `load` added to it (and to `router_id`'s own book)
        atomically."""
        chosen = await self._pick(keys=[LOAD_KEY.format(role), BOOKED_KEY.format(router_id)], args=[load, role])
        return chosen.decode() if chosen else None

    async def add_load(self, role: str, instance_id: str, load: float, router_id: str = "") -> None:
        await self._add(keys=[LOAD_KEY.format(role), BOOKED_KEY.format(router_id)], args=[load, role, instance_id])

    async def loads(self, role: str) -> dict[str, float]:
        return {k.decode(): v for k, v in await self.redis.zrange(LOAD_KEY.format(role), 0, -1, withscores=True)}

    async def fatal_step(self, key: str) -> list[str] | None:
        """The request ids in the step that process `key` (InstanceInfo.key) died in; None until published."""
        raw = await self.redis.get(CRASH_KEY.format(key))
        return None if raw is None else json.loads(raw)

    async def record_request(self, record: dict[str, str | int | float]) -> None:
        await self.redis.xadd(REQUESTS_STREAM, {k: str(v) for k, v in record.items()},
                              maxlen=REQUESTS_MAXLEN, approximate=True)

    async def recent_records(self, count: int) -> list[dict[str, str]]:
        """The most recent request records, newest first."""
        entries = await self.redis.xrevrange(REQUESTS_STREAM, count=count)
        return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]

    async def all_loads(self) -> dict[str, float]:
        """Every prefill and decode instance's booked load, in one round trip (instance ids are role-unique)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrange(LOAD_KEY.format("prefill"), 0, -1, withscores=True)
            pipe.zrange(LOAD_KEY.format("decode"), 0, -1, withscores=True)
            pre, dec = await pipe.execute()
        return {_text(k): v for k, v in (*pre, *dec)}

    async def fitted_model(self) -> dict | None:
        """The latency model the planner fitted online (`ds:model`); None before its first fit."""
        raw = await self.redis.get(MODEL_KEY)
        return json.loads(raw) if raw else None

    async def publish_model(self, model: dict) -> None:
        await self.redis.set(MODEL_KEY, json.dumps(model))

    async def close(self) -> None:
        await self.redis.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# Synchronous callers, each with its own redis-py client (`redis_auth.client`).

def read_records(client: redis.Redis, max_records: int) -> list[dict[str, str]]:
    """The most recent request records, newest first (XREVRANGE)."""
    entries = client.xrevrange(REQUESTS_STREAM, count=max_records)
    return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]


def newest_record_id(client: redis.Redis) -> str:
    """The id of the newest request record ('0' when none), for `records_after`."""
    newest = client.xrevrange(REQUESTS_STREAM, count=1)
    return _text(newest[0][0]) if newest else "0"


def records_after(client: redis.Redis, cursor: str) -> list[tuple[str, dict[str, str]]]:
    """The request records after id `cursor`, oldest first, each with its id."""
    entries = client.xrange(REQUESTS_STREAM, min=f"({cursor}")
    return [(_text(entry_id), {_text(k): _text(v) for k, v in fields.items()}) for entry_id, fields in entries]


def save_plan(client: redis.Redis, plan: dict) -> None:
    client.set(PLAN_KEY, json.dumps(plan))


def load_plan(client: redis.Redis) -> dict | None:
    raw = client.get(PLAN_KEY)
    return json.loads(raw) if raw else None


def stored_model(client: redis.Redis) -> dict | None:
    """The latency model the planner fitted online (`ds:model`); None before its first fit."""
    raw = client.get(MODEL_KEY)
    return json.loads(raw) if raw else None


def publish_fatal_step(client: redis.Redis, key: str, request_ids: list[str]) -> None:
    """Publishes the request ids in the step that process `key` (InstanceInfo.key) died in, for `fatal_step`."""
    client.set(CRASH_KEY.format(key), json.dumps(request_ids), ex=CRASH_TTL_S)
