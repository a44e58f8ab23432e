"""Cross-host pulls over UCX (ucxx): the source kvxfer sends ranges of its mapped pools, the
destination kvxfer receives them into its pool (frames.py says when small ranges are packed).

An endpoint carries one pull at a time (idle endpoints are kept per peer and reused), so a failed
or timed-out pull aborts only its own endpoint, which cancels its receives before the failure is
reported. Per pull: the destination sends the order and at once posts the receives of the reply
and of every frame; the source replies (ok, bytes, frames, crc) and sends the frames; the
destination verifies and acks; the source releases the lease on an ok ack and keeps it otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import numpy as np
import ucxx

from services.kvxfer.errors import Failure, XferError
from services.kvxfer.frames import Frame, Staging, plan_frames
from services.kvxfer.orders import PullOrder, PullSource
from services.kvxfer.pools import PoolRanges
from services.kvxfer.ucx_loop import UcxLoop

log = logging.getLogger(__name__)
IDLE_PER_PEER = 16
STAGED_IN_FLIGHT = 8  # packed frames a source sends at once, per pull (twice that received at once)
ORDER_TAG, REPLY_TAG, FRAME_TAG = 0, 1, 2  # frame i goes with tag FRAME_TAG + i
ORDER_BYTES, REPLY_BYTES = 1 << 20, 4096


async def _send_msg(ucx: UcxLoop, ep: ucxx.Endpoint, tag: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = np.frombuffer(len(body).to_bytes(4, "little") + body, dtype=np.uint8)
    await ucx.send(ep, data, tag)


async def _recv_msg(ucx: UcxLoop, ep: ucxx.Endpoint, tag: int, capacity: int) -> dict:
    """One message of at most capacity bytes: a 4-byte length, then JSON."""
    buf = np.empty(capacity, dtype=np.uint8)
    await ucx.recv(ep, buf, tag)
    size = int.from_bytes(buf[:4].tobytes(), "little")
    return json.loads(buf[4:4 + size].tobytes())


class UcxServer:
    """The source side: a UCX listener serving pull orders from this host's pools."""

    def __init__(self, ucx: UcxLoop, source: PullSource) -> None:
        self._ucx = ucx
        self._source = source
        self._staging = Staging()
        self._listener: ucxx.Listener | None = None

    def start(self, port: int) -> int:
        self._listener = self._ucx.listen(self._serve, port)
        return self._listener.port

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def _serve(self, ep: ucxx.Endpoint) -> None:
        while True:
            try:
                order = PullOrder(**await _recv_msg(self._ucx, ep, ORDER_TAG, ORDER_BYTES))
            except Exception:  # the peer closed or aborted this endpoint
                return
            if not await self._serve_one(ep, order):
                self._ucx.abort(ep)
                return

    async def _serve_one(self, ep: ucxx.Endpoint, order: PullOrder) -> bool:
        try:
            grant = await self._source.open_pull(order)
        except XferError as e:
            await _send_msg(self._ucx, ep, REPLY_TAG, {"ok": False, "failure": e.failure.name, "message": str(e)})
            return True
        ok = False
        try:
            frames = plan_frames(grant.ranges.lengths, order.pack)
            reply = {"ok": True, "nbytes": sum(f.nbytes for f in frames), "nframes": len(frames), "crc": grant.crc}
            slots = asyncio.Semaphore(STAGED_IN_FLIGHT)
            await asyncio.gather(_send_msg(self._ucx, ep, REPLY_TAG, reply),  # all at once: each await is a thread hop
                                 *(self._send_frame(ep, i, f, grant.ranges, slots) for i, f in enumerate(frames)))
            ok = (await _recv_msg(self._ucx, ep, ORDER_TAG, ORDER_BYTES))["ok"]
            return True
        except Exception as e:
            log.warning("pull of lease %s from this host failed: %s", order.lease_id, e)
            return False
        finally:
            self._source.close_pull(order, ok)

    async def _send_frame(self, ep: ucxx.Endpoint, index: int, frame: Frame, src: PoolRanges,
                          slots: asyncio.Semaphore) -> None:
        if not frame.packed:
            await self._ucx.send(ep, src.view(frame.first), FRAME_TAG + index)
            return
        async with slots:
            buf = self._staging.get()
            src.pack(frame.first, frame.count, buf)  # ~0.25 ms for 4 MB: cheaper than a thread hop
            await self._ucx.send(ep, buf[:frame.nbytes], FRAME_TAG + index)
            self._staging.put(buf)  # not after a failure: an aborted request may still hold it


class UcxPuller:
    """The destination side: pulls over pooled endpoints to source kvxfers."""

    def __init__(self, ucx: UcxLoop, connect_timeout_s: float) -> None:
        self._ucx = ucx
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[ucxx.Endpoint]] = {}
        self._staging = Staging()
        self._acks: set[asyncio.Task] = set()

    async def pull(self, peer: tuple[str, int], order: PullOrder, dst: PoolRanges,
                   verify: Callable[[int | None], Awaitable[None]]) -> None:
        """Receive the order's ranges into dst; verify(source crc) before acknowledging."""
        ep = await self._acquire(peer)
        try:
            await self._exchange(ep, order, dst, verify)
        except XferError:
            self._put_back(peer, ep)  # kept only if the exchange ended in step with the source
            raise
        except BaseException as e:
            self._ucx.abort(ep)  # cancels receives still writing into the destination pool
            if isinstance(e, Exception) and not isinstance(e, TimeoutError):
                raise XferError(Failure.UNAVAILABLE, f"connection to source kvxfer {peer[0]}:{peer[1]} failed: "
                                                     f"{type(e).__name__}: {e}") from e
            raise
        self._put_back(peer, ep)

    async def _exchange(self, ep: ucxx.Endpoint, order: PullOrder, dst: PoolRanges,
                        verify: Callable[[int | None], Awaitable[None]]) -> None:
        frames = plan_frames(dst.lengths, order.pack)
        message = {name: getattr(order, name) for name in PullOrder.__slots__}  # asdict copies every block id
        sent = asyncio.ensure_future(_send_msg(self._ucx, ep, ORDER_TAG, message))  # done once the reply is in
        reply = asyncio.ensure_future(_recv_msg(self._ucx, ep, REPLY_TAG, REPLY_BYTES))
        slots = asyncio.Semaphore(2 * STAGED_IN_FLIGHT)  # both sides take slots in frame order: no deadlock
        received = asyncio.ensure_future(asyncio.gather(
            *(self._recv_frame(ep, i, f, dst, slots) for i, f in enumerate(frames))))
        try:
            answer = await reply
            if not answer["ok"]:
                self._ucx.abort(ep)  # the frame receives are posted: only closing the endpoint withdraws them
                raise XferError(Failure[answer["failure"]], answer["message"])
            expected = sum(f.nbytes for f in frames)
            if answer["nbytes"] != expected or answer["nframes"] != len(frames):
                self._ucx.abort(ep)
                raise XferError(Failure.DATA_LOSS, f"source offers {answer['nbytes']} bytes in {answer['nframes']} "
                                                   f"frames, destination expects {expected} in {len(frames)}")
            await received
            await sent
        finally:
            for task in (sent, reply, received):
                task.cancel()
            await asyncio.gather(sent, reply, received, return_exceptions=True)
        try:
            await verify(answer["crc"])
        except XferError:
            self._ack(ep, ok=False)
            raise
        self._ack(ep, ok=True)

    def _ack(self, ep: ucxx.Endpoint, ok: bool) -> None:
        """Send the ack without waiting for it: the endpoint's next order queues behind it."""
        task = asyncio.ensure_future(_send_msg(self._ucx, ep, ORDER_TAG, {"ok": ok}))
        self._acks.add(task)
        task.add_done_callback(self._ack_sent)

    def _ack_sent(self, task: asyncio.Task) -> None:
        self._acks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the source keeps the lease till expiry
            log.warning("ack of a pull was not delivered: %s", task.exception())

    async def _recv_frame(self, ep: ucxx.Endpoint, index: int, frame: Frame, dst: PoolRanges,
                          slots: asyncio.Semaphore) -> None:
        if not frame.packed:
            await self._ucx.recv(ep, dst.view(frame.first), FRAME_TAG + index)
            return
        async with slots:
            buf = self._staging.get()
            await self._ucx.recv(ep, buf[:frame.nbytes], FRAME_TAG + index)
            dst.unpack(frame.first, frame.count, buf)  # ~0.25 ms for 4 MB: cheaper than a thread hop
            self._staging.put(buf)  # not after a failure: an aborted request may still hold it

    async def _acquire(self, peer: tuple[str, int]) -> ucxx.Endpoint:
        idle = self._idle.get(peer, [])
        while idle:
            ep = idle.pop()
            if not ep.closed:
                return ep
        try:
            return await asyncio.wait_for(
                self._ucx.connect(peer[0], peer[1], self._connect_timeout_s),
                self._connect_timeout_s)
        except Exception as e:
            raise XferError(Failure.UNAVAILABLE, f"cannot connect to source kvxfer UCX {peer[0]}:{peer[1]}: "
                                                 f"{type(e).__name__}: {e}") from e

    def _put_back(self, peer: tuple[str, int], ep: ucxx.Endpoint) -> None:
        idle = self._idle.setdefault(peer, [])
        if len(idle) < IDLE_PER_PEER and not ep.closed:
            idle.append(ep)
        else:
            self._ucx.abort(ep)

    def close(self) -> None:
        for idle in self._idle.values():
            for ep in idle:
                self._ucx.abort(ep)
        self._idle.clear()
