"""The instance registry and load book in Redis (docs/architecture.md §6).

- `ds:inst:{id}`: an instance's JSON descriptor, with a TTL its heartbeat refreshes (lapsed = dead).
- `ds:load:{role}`: sorted set of instance ids by load (pending prefill tokens; decode KV tokens).
  The router picks the least-loaded live instance and adds the request's load in one Lua call, so
  several routers do not herd onto the same instance.
- `ds:requests`: a capped stream of request records for the planner's workload profiler.
- `ds:crash:{id}/{incarnation}`: the request ids in the step a dead instance process died in (common/step_journal.py).
- `ds:model`: the latency model the planner fits online to the served steps (JSON; `services/planner/online_fit.py`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass

import redis.asyncio as aioredis

from services.common.redis_auth import resolve_url

INST_KEY = "ds:inst:{}"
LOAD_KEY = "ds:load:{}"
REQUESTS_STREAM = "ds:requests"
EPOCH_KEY = "ds:epoch"
ROUTER_KEY = "ds:router:{}"
REQUESTS_MAXLEN = 100_000
MODEL_KEY = "ds:model"
CRASH_KEY = "ds:crash:{}"  # InstanceInfo.key → JSON list of the request ids in the step its process died in
CRASH_TTL_S = 60

# KEYS[1] = load zset; ARGV[1] = load to add. Returns the chosen live id; drops dead ids on the way.
_PICK = """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  if redis.call('EXISTS', 'ds:inst:' .. id) == 1 then
    redis.call('ZINCRBY', KEYS[1], ARGV[1], id)
    return id
  end
  redis.call('ZREM', KEYS[1], id)
end
return false
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

    @property
    def key(self) -> str:
        """One process of this instance: what a failure marks."""
        return f"{self.id}/{self.incarnation}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> InstanceInfo:
        return cls(**json.loads(raw))


class Registry:
    def __init__(self, client: aioredis.Redis, ttl_s: float = 3.0) -> None:
        self.redis = client
        self.ttl_ms = int(ttl_s * 1000)
        self._pick = client.register_script(_PICK)

    @classmethod
    def from_url(cls, url: str, ttl_s: float = 3.0) -> Registry:
        return cls(aioredis.Redis.from_url(resolve_url(url), socket_timeout=2.0, socket_connect_timeout=2.0), ttl_s)

    async def register(self, info: InstanceInfo) -> None:
        """Announces an instance, with zero load when new; a restarted one keeps the load routers booked on it,
        since they take it off as their requests end."""
        await self.redis.set(INST_KEY.format(info.id), info.to_json(), px=self.ttl_ms)
        await self.redis.zadd(LOAD_KEY.format(info.role), {info.id: 0}, nx=True)

    async def router_beat(self, router_id: str) -> bool:
        """Renews a router's presence; True when no other router is present (then its bookings are all there are)."""
        others = [k async for k in self.redis.scan_iter(match=ROUTER_KEY.format("*"), count=1000)
                  if k.decode() != ROUTER_KEY.format(router_id)]
        await self.redis.set(ROUTER_KEY.format(router_id), "1", px=self.ttl_ms)
        return not others

    async def reset_load(self) -> None:
        """Every instance's booked load to zero (a sole router starting: no booking is in flight)."""
        async for key in self.redis.scan_iter(match=LOAD_KEY.format("*"), count=1000):
            members = await self.redis.zrange(key, 0, -1)
            if members:
                await self.redis.zadd(key, {m: 0 for m in members}, xx=True)

    async def heartbeat(self, info: InstanceInfo) -> None:
        """Renews the instance; puts it back in the load book (at zero) after Redis restarted empty."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(INST_KEY.format(info.id), info.to_json(), px=self.ttl_ms)
            pipe.zadd(LOAD_KEY.format(info.role), {info.id: 0}, nx=True)
            await pipe.execute()

    async def epoch(self) -> str:
        """Names this Redis's data: a new name once Redis restarted empty (so routers book their loads again)."""
        await self.redis.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
        return (await self.redis.get(EPOCH_KEY) or b"").decode()

    async def deregister(self, info: InstanceInfo) -> None:
        await self.redis.delete(INST_KEY.format(info.id))
        await self.redis.zrem(LOAD_KEY.format(info.role), info.id)

    async def instances(self) -> list[InstanceInfo]:
        keys = [key async for key in self.redis.scan_iter(match=INST_KEY.format("*"), count=1000)]
        values = await self.redis.mget(keys) if keys else []
        return [InstanceInfo.from_json(v) for v in values if v is not None]

    async def pick(self, role: str, load: float) -> str | None:
        """The least-loaded live instance of a role, with `load` added to it atomically."""
        chosen = await self._pick(keys=[LOAD_KEY.format(role)], args=[load])
        return chosen.decode() if chosen else None

    async def add_load(self, role: str, instance_id: str, load: float) -> None:
        await self.redis.zincrby(LOAD_KEY.format(role), load, instance_id)

    async def loads(self, role: str) -> dict[str, float]:
        return {k.decode(): v for k, v in await self.redis.zrange(LOAD_KEY.format(role), 0, -1, withscores=True)}

    async def fatal_step(self, key: str) -> list[str] | None:
        """The request ids in the step that process `key` (InstanceInfo.key) died in; None until published."""
        raw = await self.redis.get(CRASH_KEY.format(key))
        return None if raw is None else json.loads(raw)

    async def record_request(self, record: dict[str, str | int | float]) -> None:
        await self.redis.xadd(REQUESTS_STREAM, {k: str(v) for k, v in record.items()},
                              maxlen=REQUESTS_MAXLEN, approximate=True)

    async def close(self) -> None:
        await self.redis.aclose()
