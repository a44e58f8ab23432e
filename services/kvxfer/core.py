"""kvxfer's core: the pools of this host, the lease table, and pulls (same host or over UCX).

No gRPC here: the servicer converts messages, a PeerDirectory finds other hosts' kvxfers and a
Puller moves bytes across hosts (orders.py); both are passed in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from services.common.cuda_ipc import CudaIpcHandle
from services.common.kv_layout import KVLayout
from services.kvxfer.backlog import LeaseBacklog
from services.kvxfer.checksum import crc32
from services.kvxfer.errors import Failure, XferError
from services.kvxfer.leases import LeaseEnd, LeaseError, LeaseState, LeaseTable
from services.kvxfer.metrics import XferMetrics
from services.kvxfer.orders import PeerDirectory, Puller, PullOrder, RangeOrder, SourceGrant, SourceSpans
from services.kvxfer.pools import MappedPool, PoolRanges, copy_blocks, map_cuda, map_host
from services.kvxfer.ranged import (
    RangeCopy,
    checked_destination,
    checked_pools,
    checked_source,
    copy_in_pieces,
    ranges_crc,
)
from services.kvxfer.ranges import Ranges, block_ranges, check_blocks
from services.kvxfer.records import PullResult, SourceRef, Stats

log = logging.getLogger(__name__)
# Same-host copies run on the loop in pieces of this size (one block where blocks are larger), yielding between
# pieces: a copy in a thread costs more (the hop, and a core another process may hold).
COPY_PIECE_BYTES = 8 << 20


def same_shape(a: KVLayout, b: KVLayout) -> bool:
    """Blocks of a and b hold the same bytes (only the pool sizes may differ)."""
    return a == dataclasses.replace(b, num_blocks=a.num_blocks)


class KVXferCore:
    def __init__(self, address: str, peers: PeerDirectory, puller: Puller, default_ttl_s: float,
                 pull_timeout_s: float, metrics: XferMetrics, clock: Callable[[], float] = time.time,
                 backlog: LeaseBacklog | None = None) -> None:
        self.address = address  # this kvxfer's gRPC address, as written into handles
        self._peers = peers
        self._puller = puller
        self._default_ttl_s = default_ttl_s
        self._pull_timeout_s = pull_timeout_s
        self.metrics = metrics
        self.pools: dict[str, MappedPool] = {}
        self.leases = LeaseTable(clock)
        self._watchers: dict[str, list[asyncio.Queue[LeaseEnd]]] = {}
        self._backlog = backlog or LeaseBacklog()
        self._in_flight = 0

    # pools

    def register_pool(self, instance_id: str, layout: KVLayout, device: str, shm_path: str | None,
                      cuda_ipc: CudaIpcHandle | None, owner: str = "") -> None:
        """Map a worker's pool (replacing an earlier registration of the same id); `owner`: whose leases cover it."""
        try:
            if cuda_ipc is not None:
                pool = map_cuda(instance_id, layout, device, cuda_ipc)
            elif shm_path:
                pool = map_host(instance_id, layout, shm_path)
            else:
                raise ValueError("neither a shm path nor a CUDA IPC handle")
        except (ValueError, RuntimeError, OSError) as e:
            raise XferError(Failure.BAD_REQUEST, f"cannot map pool of {instance_id}: {e}") from e
        pool.owner = owner
        self.pools[instance_id] = pool
        log.info("registered pool of %s: %s, %d blocks of %d bytes", instance_id, device, layout.num_blocks,
                 layout.block_bytes)

    def unregister_pool(self, instance_id: str) -> int:
        """Unmap a pool; its leases end without events (their worker is leaving)."""
        self.pools.pop(instance_id, None)
        self._backlog.take(instance_id)
        dropped = self.leases.drop_instance(instance_id)
        self.metrics.live_leases(self.leases.live())
        return dropped

    # leases

    def create_lease(self, instance_id: str, block_ids: list[int], num_tokens: int, ttl_s: float, pulls: int = 1):
        pool = self._pool(instance_id)
        try:
            check_blocks(block_ids, pool.layout.num_blocks, "lease")
        except ValueError as e:
            raise XferError(Failure.BAD_REQUEST, str(e)) from e
        lease = self.leases.create(instance_id, block_ids, num_tokens, ttl_s or self._default_ttl_s, pulls)
        self.metrics.live_leases(self.leases.live())
        return lease, pool.layout

    def release(self, lease_id: str) -> bool:
        end = self.leases.release(lease_id)
        self._emit(end)
        return end is not None or self._release_pending(lease_id)

    def expire(self) -> None:
        for end in self.leases.expire():
            log.info("lease %s of %s expired", end.lease_id, end.instance_id)
            self._emit(end)

    async def run_expiry(self, interval_s: float) -> None:
        while True:
            self.expire()
            await asyncio.sleep(interval_s)

    def watch(self, instance_id: str) -> asyncio.Queue[LeaseEnd]:
        """A queue of the instance's lease ends (with those that ended while nobody watched)."""
        queue: asyncio.Queue[LeaseEnd] = asyncio.Queue()
        for end in self._backlog.take(instance_id):
            queue.put_nowait(end)
        self._watchers.setdefault(instance_id, []).append(queue)
        return queue

    def unwatch(self, instance_id: str, queue: asyncio.Queue[LeaseEnd]) -> None:
        queues = self._watchers.get(instance_id, [])
        if queue in queues:
            queues.remove(queue)
        if not queues:
            self._watchers.pop(instance_id, None)

    # pulls (destination side)

    async def pull(self, source: SourceRef, dst_instance_id: str, dst_block_ids: list[int],
                   checksum: bool, timeout_s: float = 0.0) -> PullResult:
        """Copy the source blocks into dst_block_ids; the destination blocks are the caller's to free."""
        return await self._measured(
            source, "pull", lambda: self._pull_local(source, dst_instance_id, dst_block_ids, checksum),
            lambda t: self._pull_remote(source, dst_instance_id, dst_block_ids, checksum, t), timeout_s)

    async def _measured(self, source: SourceRef, what: str, local: Callable[[], Awaitable[tuple[int, int | None]]],
                        remote: Callable[[float], Awaitable[tuple[int, int | None]]], timeout_s: float) -> PullResult:
        """Run a pull (`local` when the source instance is registered here, else `remote` with its time bound),
        counted in the metrics; `local`/`remote` return (bytes, crc)."""
        start = time.perf_counter()
        path = "same-host" if source.instance_id in self.pools else "cross-host"
        self._in_flight += 1
        try:
            if path == "same-host":
                nbytes, crc = await local()
            else:
                nbytes, crc = await remote(min(timeout_s or self._pull_timeout_s, self._pull_timeout_s))
        except XferError as e:
            self.metrics.pull_failed(e.failure.name.lower())
            log.warning("%s of lease %s failed: %s", what, source.lease_id, e)
            raise
        except asyncio.CancelledError:
            self.metrics.pull_failed("cancelled")
            raise
        finally:
            self._in_flight -= 1
        seconds = time.perf_counter() - start
        self.metrics.pull_ok(path, nbytes, seconds)
        return PullResult(nbytes, seconds, path, crc)

    async def _pull_local(self, source: SourceRef, dst_instance_id: str, dst_block_ids: list[int],
                          checksum: bool) -> tuple[int, int | None]:
        src = self.pools[source.instance_id]
        lease = self._pin(source.lease_id)
        ok = False
        try:
            if lease.instance_id != source.instance_id:
                raise XferError(Failure.BAD_REQUEST, f"lease {lease.lease_id} is not of {source.instance_id}")
            dst = self._destination(dst_instance_id, dst_block_ids, src.layout, lease.block_ids)
            await _copy(src, dst, lease.block_ids, dst_block_ids)
            crc = None
            if checksum:
                ranges = block_ranges(lease.block_ids, dst_block_ids, dst.layout.block_bytes)
                crc = await _blocking(crc32, src.ranges(ranges, "src").views())
                await _verify_crc(crc, dst, ranges)
            ok = True
            return len(dst_block_ids) * dst.layout.block_bytes, crc
        finally:
            self._emit(self.leases.unpin(lease.lease_id, release=ok))

    async def _pull_remote(self, source: SourceRef, dst_instance_id: str, dst_block_ids: list[int],
                           checksum: bool, timeout_s: float) -> tuple[int, int | None]:
        if source.kvxfer_address == self.address:
            raise XferError(Failure.NOT_FOUND, f"source instance {source.instance_id} is not registered with "
                                               f"its kvxfer {self.address} (gone?)")
        dst = self._destination(dst_instance_id, dst_block_ids, source.layout, source.block_ids)
        ranges = block_ranges(source.block_ids, dst_block_ids, dst.layout.block_bytes)
        order = PullOrder(source.lease_id, source.instance_id, source.block_ids, dst_block_ids,
                          source.layout.block_bytes, checksum, pack=not dst.on_gpu)
        got: list[int | None] = [None]

        async def verify(src_crc: int | None) -> None:
            if checksum:
                await _verify_crc(src_crc, dst, ranges)
                got[0] = src_crc

        await self._pull_over_ucx(source.kvxfer_address, order, [dst.ranges(ranges, "dst")], verify, timeout_s)
        return ranges.nbytes, got[0]

    async def _pull_over_ucx(self, kvxfer_address: str, order: PullOrder | RangeOrder, dst: list[PoolRanges],
                             verify, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                peer = await self._peers.ucx_address(kvxfer_address)
                await self._puller.pull(peer, order, dst, verify)
        except TimeoutError as e:
            raise XferError(Failure.TIMEOUT, f"pull from {kvxfer_address} took over {timeout_s} s") from e
        except XferError as e:
            if e.failure is Failure.UNAVAILABLE:
                self._peers.forget(kvxfer_address)
            raise

    async def pull_ranges(self, source: SourceRef, copies: list[RangeCopy], checksum: bool,
                          timeout_s: float = 0.0, share: int = 1) -> PullResult:
        """Copy byte ranges from pools of the source's instance into pools here (a re-sharding pull): on this
        host by one C loop, else over UCX from the source's kvxfer, which checks the source side itself. `share`:
        this pull is one of that many that together count as one pull of the lease. No copies: the lease's part
        is only counted (a source none of whose ranges the destination reads)."""
        nbytes = sum(int(c.length.sum()) for c in copies)

        async def local() -> tuple[int, int | None]:
            return nbytes, await self._ranges_local(source, copies, checksum, share)

        async def remote(bound_s: float) -> tuple[int, int | None]:
            return nbytes, await self._ranges_remote(source, copies, checksum, bound_s, share)

        return await self._measured(source, "re-sharding pull", local, remote, timeout_s)

    async def _ranges_local(self, source: SourceRef, copies: list[RangeCopy], checksum: bool,
                            share: int) -> int | None:
        lease = self._pin(source.lease_id)
        ok = False
        try:
            pairs = [checked_pools(self.pools, c, lease.instance_id, lease.block_ids) for c in copies]
            await copy_in_pieces(pairs, copies, COPY_PIECE_BYTES)
            crc = await _blocking(ranges_crc, pairs, copies, "src") if checksum else None
            if checksum and crc != await _blocking(ranges_crc, pairs, copies, "dst"):
                raise XferError(Failure.DATA_LOSS, "checksum mismatch between source and destination ranges")
            ok = True
            return crc
        finally:
            self._emit(self.leases.unpin(lease.lease_id, release=ok, share=share))

    async def _ranges_remote(self, source: SourceRef, copies: list[RangeCopy], checksum: bool,
                             timeout_s: float, share: int) -> int | None:
        if source.kvxfer_address == self.address:
            raise XferError(Failure.NOT_FOUND, f"source instance {source.instance_id} is not registered with "
                                               f"its kvxfer {self.address} (gone?)")
        dst = [PoolRanges(checked_destination(self.pools, c.dst_pool, c.dst, c.length), c.dst, c.length)
               for c in copies]
        order = RangeOrder(source.lease_id, source.instance_id,
                           [SourceSpans(c.src_pool, c.src, c.length) for c in copies], checksum, pack=True,
                           share=share)
        got: list[int | None] = [None]

        async def verify(src_crc: int | None) -> None:
            if checksum:
                dst_crc = await _blocking(crc32, [v for part in dst for v in part.views()])
                if src_crc != dst_crc:
                    raise XferError(Failure.DATA_LOSS, f"checksum mismatch: source {src_crc}, destination {dst_crc}")
                got[0] = src_crc

        await self._pull_over_ucx(source.kvxfer_address, order, dst, verify, timeout_s)
        return got[0]

    # pulls (source side, for the UCX server)

    async def open_pull(self, order: PullOrder | RangeOrder) -> SourceGrant:
        if order.instance_id not in self.pools:
            raise XferError(Failure.NOT_FOUND, f"instance {order.instance_id} is not registered here")
        lease = self._pin(order.lease_id)
        try:
            if lease.instance_id != order.instance_id:
                raise XferError(Failure.BAD_REQUEST, f"lease {lease.lease_id} is not of {order.instance_id}")
            if isinstance(order, RangeOrder):  # the same checks as a same-host re-sharding pull's source side
                parts = [PoolRanges(checked_source(self.pools, p.pool_id, p.offsets, p.lengths, lease.instance_id,
                                                   lease.block_ids), p.offsets, p.lengths) for p in order.parts]
            else:
                parts = [self._block_source(order, lease.block_ids)]
            crc = await _blocking(crc32, [v for p in parts for v in p.views()]) if order.checksum else None
            return SourceGrant(parts, crc)
        except BaseException:
            self._emit(self.leases.unpin(lease.lease_id, release=False))
            raise

    def _block_source(self, order: PullOrder, leased: list[int]) -> PoolRanges:
        pool = self.pools[order.instance_id]
        if leased != order.src_blocks:
            raise XferError(Failure.BAD_REQUEST, f"lease {order.lease_id} does not hold those blocks")
        if pool.layout.block_bytes != order.block_bytes:
            raise XferError(Failure.BAD_REQUEST, f"block size {order.block_bytes} != {pool.layout.block_bytes}")
        return pool.ranges(block_ranges(leased, order.dst_blocks, pool.layout.block_bytes), "src")

    def close_pull(self, order: PullOrder | RangeOrder, ok: bool) -> None:
        share = order.share if isinstance(order, RangeOrder) else 1
        self._emit(self.leases.unpin(order.lease_id, release=ok, share=share))

    def stats(self) -> Stats:
        m = self.metrics
        return Stats(len(self.pools), self.leases.live(), self._in_flight, m.pulls_ok, m.pulls_failed,
                     m.bytes_pulled, m.leases_expired, m.leases_released)

    # helpers

    def _pool(self, instance_id: str) -> MappedPool:
        pool = self.pools.get(instance_id)
        if pool is None:
            raise XferError(Failure.BAD_REQUEST, f"instance {instance_id} has no pool registered here")
        return pool

    def _pin(self, lease_id: str):
        try:
            return self.leases.pin(lease_id)
        except LeaseError as e:
            raise XferError(Failure.LEASE_GONE, str(e)) from e

    def _destination(self, dst_instance_id: str, dst_block_ids: list[int], src_layout: KVLayout,
                     src_block_ids: list[int]) -> MappedPool:
        """The destination pool, once the blocks may go there (same block shape, as many, valid ids)."""
        dst = self._pool(dst_instance_id)
        if not same_shape(src_layout, dst.layout):
            raise XferError(Failure.BAD_REQUEST, f"source layout {src_layout} and destination layout "
                                                 f"{dst.layout} differ")
        if len(src_block_ids) != len(dst_block_ids):
            raise XferError(Failure.BAD_REQUEST, f"{len(src_block_ids)} source blocks but {len(dst_block_ids)} "
                                                 "destination blocks")
        try:
            check_blocks(dst_block_ids, dst.layout.num_blocks, "destination")
        except ValueError as e:
            raise XferError(Failure.BAD_REQUEST, str(e)) from e
        return dst

    def _release_pending(self, lease_id: str) -> bool:
        lease = self.leases.get(lease_id)
        return lease is not None and lease.release_pending

    def _emit(self, end: LeaseEnd | None) -> None:
        if end is None:
            return
        self.metrics.lease_ended(end.state is LeaseState.EXPIRED)
        self.metrics.live_leases(self.leases.live())
        queues = self._watchers.get(end.instance_id)
        if queues:
            for queue in queues:
                queue.put_nowait(end)
        elif end.instance_id in self.pools and self._backlog.add(end) is not None:
            self.metrics.lease_end_dropped()
            if self._backlog.dropped[end.instance_id] == 1:
                log.warning("nobody watches the leases of %s and %d of their ends are kept: dropping the oldest "
                            "(its worker frees their blocks at expiry + grace)", end.instance_id, self._backlog.cap)


async def _copy(src: MappedPool, dst: MappedPool, src_ids: list[int], dst_ids: list[int]) -> None:
    """Copy piece by piece, letting other tasks run in between; a cancelled copy stops between
    pieces, so nothing writes into the destination once the pull has ended. Between two GPU pools in
    one piece: a launch and a wait each cost more than the device's copy of 8 MB."""
    gpus = src.on_gpu and dst.on_gpu
    step = len(src_ids) if gpus else max(1, COPY_PIECE_BYTES // src.layout.block_bytes)
    for first in range(0, len(src_ids), step):
        if first:
            await asyncio.sleep(0)
        copy_blocks(src, dst, src_ids[first:first + step], dst_ids[first:first + step])


async def _blocking(fn, *args):
    """Run fn off the loop; if cancelled, wait for it to end."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


async def _verify_crc(src_crc: int | None, dst: MappedPool, ranges: Ranges) -> None:
    dst_crc = await _blocking(crc32, dst.ranges(ranges, "dst").views())
    if src_crc != dst_crc:
        raise XferError(Failure.DATA_LOSS, f"checksum mismatch: source {src_crc}, destination {dst_crc}")
