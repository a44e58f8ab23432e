"""The prefill instance's logic: admit, run to the first token, lease the K/V, free it when the lease ends. A prompt
whose prefix a decode instance leased (reverse pull) first pulls the blocks of it this pool's cache lacks and
caches them, so that the prefill computes only the rest."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from distserve.v1 import kv_pb2
from services.common.errors import Unavailable
from services.common.prefix_hash import from_wire, to_wire
from services.common.sampling import SamplingParams, TokenLogprobs
from services.common.stamps import Lifetime
from services.engine.async_engine import AsyncEngine
from services.instance.abandoned import free_after_copy
from services.instance.kv_shards import with_site_leases
from services.instance.request_bound import RequestBound
from services.kvxfer.api import KVXferClient, LeaseKeeper, PullFailed, RangeCopy

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PrefillResult:
    first_token: int
    finish_reason: str = ""
    handle: kv_pb2.KVHandle | None = None
    stamps: Lifetime = field(default_factory=Lifetime)
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # of the first token, when asked
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)  # of prompt tokens 1.., when asked
    cached_tokens: int = 0  # prompt tokens whose K/V came from the prefix cache
    pulled_blocks: int = 0  # of those, blocks pulled from the request's leased prefix


@dataclass(slots=True)
class _Held:
    request_id: str
    leases: int  # of its leases, those not ended yet (one per kvxfer serving the instance's pools)


class PrefillCore:
    def __init__(self, engine: AsyncEngine, kv: KVXferClient, instance_id: str, lease_ttl_s: float,
                 max_pending: int, pull_timeout_s: float, shards: Sequence[kv_pb2.KVShard] = (),
                 sites: Sequence[tuple[KVXferClient, str]] = ()) -> None:
        """`sites`: the kvxfers of the instance's ranks on other hosts, each with the pool id its leases are
        taken under there; a request's blocks go back once its lease at every kvxfer has ended."""
        self.engine = engine
        self.shards = list(shards)  # a TP/PP instance's rank pools, written into every handle
        self.kv = kv
        self.pull_timeout_s = pull_timeout_s  # of a leased prefix
        # A pull in flight holds its lease past expiry: free by our own clock only well after that.
        self.leases = LeaseKeeper(kv, instance_id, self.free_leased, grace_s=pull_timeout_s + 5)
        self._sites = [(kv, self.leases)] + [
            (client, LeaseKeeper(client, anchor, self.free_leased, grace_s=pull_timeout_s + 5))
            for client, anchor in sites]
        self.instance_id = instance_id
        self.lease_ttl_s = lease_ttl_s
        self.bound = RequestBound(max_pending, "prefill")
        # held blocks → their request (a lease names its blocks; prefix-cached requests share leading blocks, but
        # each holds the block of its last prompt token alone)
        self._holder: dict[tuple[int, ...], _Held] = {}
        self._keepers: list[asyncio.Task] = []

    def start(self) -> None:
        self._keepers = [asyncio.create_task(keeper.run()) for _, keeper in self._sites]

    async def stop(self) -> None:
        for task in self._keepers:
            task.cancel()

    def free_leased(self, block_ids: list[int]) -> None:
        """A LeaseKeeper's callback: a lease ended (pulled, released, expired); the request's blocks go back when
        it was the last of its leases."""
        held = self._holder[tuple(block_ids)]
        held.leases -= 1
        if held.leases == 0:
            del self._holder[tuple(block_ids)]
            self.engine.release(held.request_id)

    async def _lease(self, block_ids: list[int], num_tokens: int, pulls: int) -> kv_pb2.KVHandle:
        """The handle of a lease at every site (its shards name the other sites' leases). When one cannot be
        made, those made are released and the error raised: the blocks go back once they have ended."""
        made: list[tuple[KVXferClient, kv_pb2.KVHandle]] = []
        try:
            for client, keeper in self._sites:
                made.append((client, await keeper.create_lease(block_ids, num_tokens, self.lease_ttl_s, pulls)))
        except BaseException:
            for _ in range(len(self._sites) - len(made)):  # leases never made never end: count them ended
                self.free_leased(block_ids)
            for client, handle in made:
                try:
                    await client.release(handle.lease_id)
                except Exception:  # it expires on its own, and its keeper frees it then
                    pass
            raise
        handle = made[0][1]
        handle.shards.extend(self.shards)
        with_site_leases(handle, {client.address: h for client, h in made[1:]})
        return handle

    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams, pulls: int = 1,
                      cache_namespace: str = "", prefix: kv_pb2.KVHandle | None = None) -> PrefillResult:
        """Runs a prompt to its first token and leases its K/V; `prefix`: another instance's lease of the prompt's
        cached prefix, pulled where this pool's cache lacks it (a failed pull costs a recompute)."""
        self.engine.validate(prompt_ids, params)
        stamps = Lifetime(prefill_queued=time.time())
        with self.bound.slot():
            held, pulled = await self._take_prefix(prefix, prompt_ids, params, cache_namespace) if prefix else ([], 0)
            try:
                async for out in self.engine.generate(request_id, prompt_ids, params, cache_namespace=cache_namespace):
                    last = out
            finally:
                self.engine.free_blocks(held)  # the request holds its own share of them now, or ended
        stamps.prefill_start, stamps.prefill_end = last.step_start, last.step_end
        if last.finished:
            return PrefillResult(last.new_token_ids[0], last.finish_reason.value, None, stamps, last.logprobs,
                                 last.prompt_logprobs, last.num_cached_tokens, pulled)
        self._holder[tuple(last.held_blocks)] = _Held(request_id, len(self._sites))
        try:
            handle = await self._lease(last.held_blocks, len(prompt_ids), pulls)
        except grpc.aio.AioRpcError as exc:  # kvxfer away or restarted: retryable, not this request's fault
            raise Unavailable(f"KV transfer service: {exc.code().name}") from exc
        handle.block_hashes.extend(to_wire(last.block_hashes))
        return PrefillResult(last.new_token_ids[0], "", handle, stamps, last.logprobs, last.prompt_logprobs,
                             last.num_cached_tokens, pulled)

    async def _take_prefix(self, prefix: kv_pb2.KVHandle, prompt_ids: list[int], params: SamplingParams,
                           cache_namespace: str) -> tuple[list[int], int]:
        """Holds this pool's cached blocks of the leased prefix and pulls the others into blocks it caches; returns
        the blocks held (the caller frees them once its request has taken them) and how many were pulled. Ends the
        lease in every case: an empty pull where nothing of it is of use (caching off, prompt logprobs, another
        block size, TP/PP, hashes that are not the prompt's, or no free block now)."""
        engine = self.engine
        bs = engine.block_size
        usable = params.prompt_logprobs is None and not self.shards and not prefix.shards \
            and prefix.layout.block_size == bs
        # the prefill computes at least the prompt's last token: never the block holding it
        full = min(prefix.num_tokens // bs, (len(prompt_ids) - 1) // bs) if usable else 0
        carried = from_wire(prefix.block_hashes[:full])
        if not engine.vouched(prompt_ids, cache_namespace, carried):
            log.warning("a leased prefix's hashes are not the prompt's: computing it here")
            carried = []
        full = len(carried)
        own = engine.hold_cached(prompt_ids, cache_namespace, full * bs)
        # the lease's blocks this pool lacks; none where a sliding layer would need blocks before the lease's window
        wanted = (engine.groups.missing(full * bs, own.num_blocks, prefix.num_tokens) or []) if own.num_blocks < full else []
        dst = (self.engine.try_reserve(len(wanted)) or []) if wanted else []
        copies = [RangeCopy.of_blocks(prefix.instance_id, self.instance_id, [prefix.block_ids[i] for _, i in wanted],
                                      dst, engine.layout.block_bytes)] if dst else []
        try:
            await self.kv.pull_ranges(prefix, copies, timeout_s=self.pull_timeout_s)
        except asyncio.CancelledError:
            self.engine.free_blocks(own.held())  # the copy never writes these
            free_after_copy(self.engine, dst)
            raise
        except PullFailed as exc:
            log.warning("could not pull a leased prefix (computing it here): %s", exc)
            self.engine.free_blocks(dst)
            return own.held(), 0
        if dst:
            tokens = full * bs
            engine.cache_prefix(engine.groups.tables(engine.groups.fill(own.tables, dst, tokens), tokens), carried)
        return own.held() + dst, len(dst)
