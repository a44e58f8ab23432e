"""The pick of instances by the latency model: each live prefill instance's predicted TTFT for this prompt is its
queue plus the prefill of the suffix it has not cached (the cache index says how many of the prompt's leading
blocks its pool holds); the least wins. Without a fitted line for every candidate, the same sum in tokens. Then
the decode instance holding most of the prompt (within one request of the least load) and the path the K/V takes
there (`router/paths.py`).

A stale index entry only mispredicts: the engine looks its own cache up again, and computes what it lacks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from services.common.prefix_hash import block_hashes
from services.common.registry import InstanceInfo, Registry
from services.common.step_model.predict import Mix, predict_ttft
from services.common.step_model.stored import FittedModel
from services.router.admission import Candidate
from services.router.dispatch import Dispatcher
from services.router.index_feed import IndexFeed
from services.router.paths import PathLimits, Route, choose_path, pick_decode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PrefillPick:
    instance_id: str  # "": none holds more of the prompt than the others; the load book picks
    cached_tokens: int  # of the prompt, held there (as the index says)


def shareable(tokens: int, prompt: int, block_size: int) -> int:
    """Of `tokens` a cache holds, those a prefill can skip: full blocks before the block of the last prompt token
    (whose logits it computes)."""
    return min(tokens, (prompt - 1) // block_size * block_size)


def pick_prefill(candidates: list[Candidate], cached: dict[str, int], prompt: int, batch_tokens: int,
                 model: FittedModel | None, mix: Mix | None = None) -> PrefillPick | None:
    """The candidate of least predicted TTFT for a prompt of which `cached[id]` tokens are cached on `id`."""
    lines = [model.prefill.get(c.kind) for c in candidates] if model else []
    timed = bool(lines) and all(lines)

    def cost(i: int) -> tuple[float, float]:
        c = candidates[i]
        hit = cached.get(c.id, 0)
        ttft = predict_ttft(lines[i], c.load, prompt - hit, batch_tokens, mix, c.running_s, cached=hit) if timed \
            else c.load + prompt - hit
        return ttft, c.load

    if not candidates:
        return None
    best = candidates[min(range(len(candidates)), key=cost)]
    least = min(cached.get(c.id, 0) for c in candidates)
    if cached.get(best.id, 0) == least:  # the cache tells them apart nowhere: the book's atomic pick (no herding)
        return PrefillPick("", least)
    return PrefillPick(best.id, cached.get(best.id, 0))


class PrefixRouter:
    """Reads what the pick needs per request: the prefix-cache index, kept in memory (`index_feed.py`; one Redis
    round trip brings it up to date), and the loads admission reads (`loads`: every router's bookings at the
    gate's last read and this router's own since; without a gate, the load book read per request), with the
    fitted model and recent mix."""

    def __init__(self, registry: Registry, dispatcher: Dispatcher, batch_tokens: int, limits: PathLimits,
                 model: Callable[[], FittedModel | None] = lambda: None, mix: Callable[[], Mix | None] = lambda: None,
                 loads: Callable[[str], list[Candidate]] | None = None) -> None:
        self.registry = registry
        self.limits = limits
        self.dispatcher = dispatcher
        self.batch_tokens = batch_tokens
        self.model = model
        self.mix = mix
        self.loads = loads  # None: read the load book per request (colocated and chunked: no gate reads it)
        self.feed = IndexFeed()

    async def route(self, prompt_ids: list[int], namespace: str, max_tokens: int, paths: bool = True,
                    prefills_role: str = "prefill") -> tuple[PrefillPick | None, Route]:
        """The prefill pick among the instances of `prefills_role` (colocated or chunked: the instance that serves the
        whole request) and, with `paths` (disaggregated), the decode instance and the path (`router/paths.py`)."""
        prefill, decode = self.dispatcher.live(prefills_role), self.dispatcher.live("decode") if paths else []
        loads = self.loads or await self._book_loads((prefills_role, "decode") if paths else (prefills_role,))
        held = await self.cached_tokens(prefill + decode, prompt_ids, namespace)
        size = {i.id: i.block_size for i in prefill + decode}
        cached = {i: shareable(n, len(prompt_ids), size[i]) for i, n in held.items()}
        model, mix = self.model(), self.mix()
        prefills = loads(prefills_role)
        pick = pick_prefill(prefills, cached, len(prompt_ids), self.batch_tokens, model, mix)
        if pick is None or not paths:
            return pick, Route("pull")
        chosen = next((c for c in prefills if c.id == pick.instance_id), min(prefills, key=lambda c: c.load))
        d = pick_decode(loads("decode"), held, len(prompt_ids) + max_tokens)
        line = model.prefill.get(chosen.kind) if model else None
        info = next((i for i in decode if d and i.id == d.id), None)
        per_token = info.block_bytes / info.block_size / self.limits.pull_bytes_per_s \
            if info and info.block_size and self.limits.pull_bytes_per_s else 0.0
        route = choose_path(len(prompt_ids), chosen, pick.cached_tokens, d, held.get(d.id, 0) if d else 0,
                            cached.get(d.id, 0) if d else 0, line, self.batch_tokens, self.limits, mix, per_token)
        return pick, route

    async def cached_tokens(self, instances: list[InstanceInfo], prompt_ids: list[int],
                            namespace: str) -> dict[str, int]:
        """Per instance, the prompt tokens its pool holds in full blocks as the index says; {} while Redis is away
        (the load book picks: an index that cannot be brought up to date may send a request after blocks gone)."""
        if self.registry.away:  # not even a join of a read under way: that one may wait on a stalled Redis
            return {}
        try:
            await self.feed.catch_up(self.registry.cache)
        except (RedisError, OSError) as exc:
            if not self.registry.away:  # the breaker logs the outage once
                log.warning("prefix-cache index unreachable, routing as if nothing were cached: %s", exc)
            return {}
        by_size: dict[int, list[str]] = {}
        for info in instances:
            if info.block_size:
                by_size.setdefault(info.block_size, []).append(info.id)
        found: dict[str, int] = {}
        for size, ids in by_size.items():
            held = self.feed.index.held_prefix(ids, block_hashes(prompt_ids, size, namespace))
            found.update({i: blocks * size for i, blocks in held.items()})
        return found

    async def follow(self, every_s: float) -> None:
        """Keeps the index whole in the background (`IndexFeed.refresh`) every `every_s` seconds."""
        while True:
            await self.refresh_index()
            await asyncio.sleep(every_s)

    async def refresh_index(self) -> None:
        live = [i.id for i in self.dispatcher.instances.values() if i.block_size]
        try:
            await self.feed.refresh(self.registry.cache, live)
        except (RedisError, OSError) as exc:
            log.debug("prefix-cache index not refreshed: %s", exc)

    async def _book_loads(self, roles: tuple[str, ...]) -> Callable[[str], list[Candidate]]:
        """The live instances of each role with the load book's loads (every router's bookings; this router's own
        while Redis is away), read now."""
        books = {}
        for role in roles:
            try:
                books[role] = await self.registry.loads(role)
            except (RedisError, OSError):
                books[role] = {}
        local = self.dispatcher.local_load
        return lambda role: [Candidate(i.id, f"{role}@{i.device}", max(books[role].get(i.id, 0.0), local.get(i.id, 0.0)))
                             for i in self.dispatcher.live(role)]
