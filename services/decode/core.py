"""The decode instance's logic: wait for free blocks (pull, not push), pull the K/V its prefix cache lacks (a
follow-up turn: only the new blocks), stream the tokens; or, given no K/V, prefill the prompt here (conditional
disaggregation: its cached prefix reused, a short suffix computed). It also leases a prompt's cached prefix to a
prefill instance (reverse pull)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from distserve.v1 import kv_pb2
from services.common.errors import EngineInputError, LocalPrefillDeclined
from services.common.pool_site import PoolSite, sites_from_handle
from services.common.prefix_hash import block_hashes, from_wire, to_wire
from services.common.sampling import SamplingParams, TokenLogprobs
from services.common.stamps import Lifetime
from services.decode.local_pacer import LOCAL_PREFILLS, LocalPacer
from services.decode.reshard import reshard_copies
from services.engine.async_engine import AsyncEngine, StepOutput
from services.instance.abandoned import free_after_copy
from services.instance.kv_shards import SitePull, site_pulls
from services.instance.request_bound import RequestBound
from services.kvxfer.api import KVXferClient, LeaseKeeper

log = logging.getLogger(__name__)


@dataclass(slots=True)
class DecodeChunk:
    token_ids: list[int]
    finish_reason: str = ""
    stamps: Lifetime | None = None
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # prefilled here, when asked
    cached_tokens: int = 0  # on the first chunk of a local prefill: prompt tokens it did not compute (cached here)
    pulled_blocks: int = 0  # on the first chunk of a pulled request: blocks pulled (those not cached here)
    decode_cached_tokens: int = 0  # ... and the prompt tokens of the blocks cached here (not pulled)


@dataclass(frozen=True, slots=True)
class Pulled:
    """A pulled request's blocks (services/common/kv_groups.py `flat`): the prompt's first `cached_blocks` blocks
    of every group cached here, `num_pulled` blocks pulled."""

    blocks: list[int]
    cached_blocks: int
    num_pulled: int


class DecodeCore:
    def __init__(self, engine: AsyncEngine, kv: KVXferClient, instance_id: str, pull_timeout_s: float, max_pending: int,
                 pools: Mapping[str, PoolSite] | None = None, kv_of: Mapping[str, KVXferClient] | None = None,
                 local_prefill_share: float = 1.0) -> None:
        self.engine = engine
        # this instance's rank pools (TP/PP) by pool id; none given: its single pool
        self.pools = dict(pools or {instance_id: PoolSite.whole(engine.layout, engine.groups.num_layers)})
        self.kv = kv
        self.kv_of = dict(kv_of or {})  # per rank pool on another host than rank 0's: that host's kvxfer
        self.instance_id = instance_id
        self.pull_timeout_s = pull_timeout_s
        self.bound = RequestBound(max_pending, "decode")
        self.pacer = LocalPacer(local_prefill_share)
        self._unread: set[asyncio.Future] = set()  # empty pulls ending unread source leases, in flight
        # leased prefixes (reverse pulls): a pull in flight holds its lease past expiry, so free by our clock later
        self.leases = LeaseKeeper(kv, instance_id, engine.free_blocks, grace_s=pull_timeout_s + 5)
        self._keeper: asyncio.Task | None = None

    def start(self) -> None:
        self._keeper = asyncio.create_task(self.leases.run())

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()

    async def lease_prefix(self, prompt_ids: list[int], cache_namespace: str, ttl_s: float) -> kv_pb2.KVHandle | None:
        """A lease of the cached blocks of the prompt's longest cached prefix, held (never evicted) until the lease
        ends; None when none is cached, or on a TP/PP instance (its rank pools would need a lease each)."""
        if len(self.pools) > 1:
            return None
        prefix = self.engine.hold_cached(prompt_ids, cache_namespace, len(prompt_ids) - 1)
        if not prefix.num_blocks:
            return None
        bs = self.engine.block_size
        tokens = prefix.num_blocks * bs
        blocks = self.engine.groups.flat(prefix.tables, tokens)
        try:
            handle = await self.leases.create_lease(blocks, tokens, ttl_s)
        except BaseException:
            self.engine.free_blocks(blocks)
            raise
        handle.block_hashes.extend(to_wire(block_hashes(prompt_ids, bs, cache_namespace, prefix.num_blocks)))
        return handle

    async def decode(self, request_id: str, prompt_ids: list[int], first_token: int | None, params: SamplingParams,
                     handle: kv_pb2.KVHandle | None, cache_namespace: str = "",
                     local_cap: int = 0) -> AsyncIterator[DecodeChunk]:
        """Streams a request from the K/V `handle` names, or without one from a prefill here of at most
        `local_cap` uncached prompt tokens (0: any)."""
        self.engine.validate(prompt_ids, params)
        if handle is None and first_token is not None:
            raise EngineInputError("first_token", "needs the K/V it follows (kv): without kv the prompt is prefilled "
                                                  "here and its first token sampled here")
        if handle is not None and handle.num_tokens != len(prompt_ids):
            raise EngineInputError("kv.num_tokens", f"{handle.num_tokens} != prompt length {len(prompt_ids)}")
        with self.bound.slot():
            held: list[int] = []  # a local prefill's cached prefix, kept from eviction until the engine takes it
            pulled = Pulled([], 0, 0)
            if handle is None:
                held = self._local_prefix(prompt_ids, cache_namespace, local_cap)
                stamps = Lifetime(prefill_queued=time.time())
                outputs = self.engine.generate(request_id, prompt_ids, params, cache_namespace=cache_namespace)
            else:
                stamps = Lifetime(decode_queued=time.time())
                pulled = await self._pulled(handle, prompt_ids, first_token, cache_namespace, stamps)
                outputs = self.engine.continue_prefilled(request_id, prompt_ids, first_token, params, pulled.blocks,
                                                         cache_namespace, from_wire(handle.block_hashes))
            first = True
            try:
                async for out in outputs:
                    if held:  # admitted: the sequence holds its cached blocks itself now
                        self.engine.free_blocks(held)
                        held = []
                    yield self._chunk(out, stamps if first else None, handle is None, pulled)
                    first = False
            finally:
                if held:
                    self.engine.free_blocks(held)

    def _chunk(self, out: StepOutput, stamps: Lifetime | None, local: bool, pulled: Pulled) -> DecodeChunk:
        """A step's output as a chunk; the first (`stamps` given) carries the stamps and the cache figures."""
        reason = out.finish_reason.value if out.finish_reason else ""
        chunk = DecodeChunk(out.new_token_ids, reason, stamps, out.logprobs, out.prompt_logprobs)
        if stamps is None:
            return chunk
        if local:
            stamps.prefill_start, stamps.prefill_end = out.step_start, out.step_end
            stamps.decode_start = out.step_end
            chunk.cached_tokens = out.num_cached_tokens
        else:
            stamps.decode_start = out.step_start
            chunk.decode_cached_tokens = pulled.cached_blocks * self.engine.block_size
            chunk.pulled_blocks = pulled.num_pulled
        return chunk

    def _local_prefix(self, prompt_ids: list[int], cache_namespace: str, cap: int) -> list[int]:
        """Holds the prompt's cached prefix for a prefill here, or raises LocalPrefillDeclined: more than `cap`
        tokens uncached here (0: no bound), or the step share of local prefills spent."""
        prefix = self.engine.hold_cached(prompt_ids, cache_namespace, len(prompt_ids) - 1)
        held = prefix.held()
        uncached = len(prompt_ids) - prefix.num_blocks * self.engine.block_size
        if cap and uncached > cap:
            reason = f"{uncached} prompt tokens uncached here, more than the cap of {cap}"
        elif not self.pacer.take(self.engine.steps, self.engine.busy()):
            reason = "its share of steps for local prefills is spent"
        else:
            LOCAL_PREFILLS.labels(self.instance_id, "served").inc()
            return held
        self.engine.free_blocks(held)
        LOCAL_PREFILLS.labels(self.instance_id, "declined").inc()
        raise LocalPrefillDeclined(f"local prefill declined: {reason}")

    async def _pulled(self, handle: kv_pb2.KVHandle, prompt_ids: list[int], first_token: int | None,
                      cache_namespace: str, stamps: Lifetime) -> Pulled:
        """Blocks holding the handle's K/V (what a sequence of the prompt keeps, services/common/kv_groups.py): the
        prompt's leading blocks the prefix cache supplied, held, and the others reserved and pulled into. A failed
        pull frees them all. When the pool cannot give the rest at once, the cached ones are let go and the whole
        prompt's blocks awaited (FCFS): a waiter holds nothing, so waiters cannot starve each other; then the cache
        is looked up again and only what it lacks pulled."""
        n, groups = len(prompt_ids), self.engine.groups
        # without first_token the last prompt position is computed again: its block is not shared
        shareable = n - (first_token is None)
        cached = self.engine.hold_cached(prompt_ids, cache_namespace, shareable, keep_tokens=n)
        # the prefix holds what the sequence keeps of its blocks: the rest of what it keeps is reserved
        rest = self.engine.try_reserve(groups.num_kept(n) - len(cached.held())) if cached.num_blocks else None
        if rest is None:
            self.engine.free_blocks(cached.held())
            rest = await self.engine.reserve_blocks(n)
            # what the pool caches of the prompt now (others' requests ran meanwhile) is not pulled again
            cached = self.engine.hold_cached(prompt_ids, cache_namespace, shareable, keep_tokens=n)
            spare = len(cached.held())
            self.engine.free_blocks(rest[:spare])
            rest = rest[spare:]
        blocks = groups.fill(cached.tables, rest, n)
        stamps.xfer_start = time.time()
        try:
            await self._pull(handle, blocks, cached.num_blocks)
        except asyncio.CancelledError:
            free_after_copy(self.engine, blocks)
            raise
        except BaseException:
            self.engine.free_blocks(blocks)
            raise
        stamps.xfer_end = time.time()
        return Pulled(blocks, cached.num_blocks, len(rest))

    async def _pull(self, handle: kv_pb2.KVHandle, blocks: list[int], cached_blocks: int) -> None:
        """Pulls into `blocks` (the flat blocks of the handle's tokens) those from the prompt's `cached_blocks`-th
        block on: a whole lease between single pools by block; a part of one, or between TP/PP layouts, by byte
        ranges (each rank pool gets its layers and heads, each layer its group's blocks)."""
        if not cached_blocks and not handle.shards and len(self.pools) == 1:
            await self.kv.pull(handle, self.instance_id, blocks, timeout_s=self.pull_timeout_s)
            return
        groups = self.engine.groups
        wanted = groups.missing(handle.num_tokens, cached_blocks, handle.num_tokens) or []
        copies = reshard_copies(sites_from_handle(handle, groups), [handle.block_ids[i] for _, i in wanted], self.pools,
                                [blocks[i] for _, i in wanted], groups, [g for g, _ in wanted])
        # Ranks on several hosts (the source's, this instance's): one pull per (source kvxfer, destination kvxfer),
        # each through the kvxfer that serves its destination pools, under its source site's lease. All run to
        # their end before a failure is raised, so no copy still lands once the blocks are freed. Nothing to copy
        # (every block cached here): the leases are only ended.
        pulls = site_pulls(handle, [c for c in copies if len(c.length)], self.kv, self.kv_of)
        for pull in pulls:
            if not pull.copies:
                self._end_unread(pull)
        done = await asyncio.gather(*(p.kv.pull_ranges(p.source, p.copies, timeout_s=self.pull_timeout_s, share=p.share)
                                      for p in pulls if p.copies), return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result

    def _end_unread(self, pull: SitePull) -> None:
        """Ends a source lease the request reads nothing of, by an empty pull; it copies nothing, so the request
        does not wait for it, and where it fails (that site's kvxfer away) the lease expires there."""
        task = asyncio.ensure_future(pull.kv.pull_ranges(pull.source, [], timeout_s=self.pull_timeout_s))
        self._unread.add(task)
        task.add_done_callback(self._unread_ended)

    def _unread_ended(self, task: asyncio.Future) -> None:
        self._unread.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not end a lease the request read nothing of (it expires): %s", task.exception())
