"""Cross-host pulls over UCX (ucxx): the source kvxfer sends ranges of its mapped pools, the
destination kvxfer receives them into its pool. Runs of small ranges travel as frames (frames.py): each
side sends or receives a frame of host memory as one scatter-gather message straight from or into its pool
(iov.py), or packs it through a staging buffer where the helper cannot be built; the bytes on the wire are the
same, so the two sides choose independently.

A re-sharding pull (a range order) names byte ranges of several source pools; they travel part after part
(a part: one source pool's ranges into one destination pool), frame tags running on across parts.

An endpoint carries one pull at a time (idle endpoints are kept per peer and reused), so a failed
or timed-out pull aborts only its own endpoint, which cancels its receives before the failure is
reported. Per pull: the destination posts the receives of the reply and of every frame and sends
the order; the source sends the frames, then its reply (ok, bytes, frames, crc); the destination
verifies and returns, and acks on the next loop turn (after the Pull reply has gone out); the source
releases the lease on an ok ack and keeps it otherwise. Sends and receives are futures posted at
once (ucx_loop.py), not a task each.

A new endpoint's first message is the puller's hello with the deployment's kvxfer token (auth.py); the
source serves nothing on an endpoint whose hello is missing, late or wrong, and aborts it. A kvxfer without a
deployment secret sends and accepts an empty token.

With KV encryption on (`--encrypt-kv`; sealing.py) every frame travels as a sealed chunk bound to the pull's id
(which the puller draws for each pull) and to its tag. The hello says whether the puller encrypts; a source that
disagrees answers every order on that endpoint with a MISCONFIGURED refusal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable

import numpy as np
import ucxx

from services.kvxfer.errors import Failure, XferError
from services.kvxfer.orders import (
    OFFSET,
    PullOrder,
    PullSource,
    RangeHeader,
    RangeOrder,
    decode_order,
    encode_order,
    range_body,
)
from services.kvxfer.pools import PoolRanges
from services.kvxfer.ucx.frames import Frame, Staging, plan_frames
from services.kvxfer.ucx.iov import helper
from services.kvxfer.ucx.loop import UcxLoop
from services.kvxfer.ucx.sealing import Sealer, chunked

log = logging.getLogger(__name__)
IDLE_PER_PEER = 16
STAGED_IN_FLIGHT = 8  # packed frames a source sends at once, per pull (twice that received at once)
ORDER_TAG, REPLY_TAG, FRAME_TAG = 0, 1, 2  # frame i goes with tag FRAME_TAG + i
ORDER_BYTES, REPLY_BYTES = 1 << 20, 4096
HELLO_TIMEOUT_S = 5.0


def _encode(message: dict) -> np.ndarray:
    body = json.dumps(message).encode()
    return np.frombuffer(len(body).to_bytes(4, "little") + body, dtype=np.uint8)


def _decode(buf: np.ndarray) -> dict:
    """A reply or an ack: a 4-byte length, then JSON (orders carry their block ids as arrays: orders.py)."""
    size = int.from_bytes(buf[:4].tobytes(), "little")
    return json.loads(buf[4:4 + size].tobytes())


class UcxServer:
    """The source side: a UCX listener serving pull orders from this host's pools."""

    def __init__(self, ucx: UcxLoop, source: PullSource, token: str = "",
                 admit: Callable[[str], bool] | None = None, sealer: Sealer | None = None) -> None:
        self._ucx = ucx
        self._source = source
        self._token = token  # what a peer's hello must carry ("": anything)
        self._admit = admit  # which client addresses may connect at all (conn_filter.py; None: any)
        self._sealer = sealer  # None: frames travel in clear
        self._staging = Staging()
        self._listener: ucxx.Listener | None = None

    def start(self, port: int) -> int:
        self._listener = self._ucx.listen(self._serve, port, self._admit)
        return self._listener.port

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def _serve(self, ep: ucxx.Endpoint) -> None:
        buf = np.empty(ORDER_BYTES, dtype=np.uint8)  # this endpoint's orders and acks
        hello = await self._hello(ep, buf)
        if hello is None:
            self._ucx.abort(ep)
            return
        refusal = self._disagreement(bool(hello.get("encrypt")))
        while True:
            try:
                await self._ucx.recv(ep, buf, ORDER_TAG)
                order = decode_order(buf)
                if isinstance(order, RangeHeader):  # its numbers follow
                    body = np.empty(order.items, OFFSET)
                    if order.items:
                        await self._ucx.recv(ep, body, ORDER_TAG)
                    order = order.with_body(body)
            except Exception:  # the peer closed or aborted this endpoint, or sent a malformed order
                return
            if not await self._serve_one(ep, order, buf, refusal):
                self._ucx.abort(ep)
                return

    async def _hello(self, ep: ucxx.Endpoint, buf: np.ndarray) -> dict | None:
        """The peer's hello if it carries the token, else None."""
        try:
            await asyncio.wait_for(self._ucx.recv(ep, buf, ORDER_TAG), HELLO_TIMEOUT_S)
            hello = _decode(buf)
            presented = str(hello.get("token", ""))
        except Exception:  # closed, silent or not a hello
            log.warning("a UCX peer sent no hello; endpoint closed")
            return None
        if self._token and not hmac.compare_digest(presented.encode(), self._token.encode()):
            log.warning("a UCX peer presented a wrong deployment token; endpoint closed")
            return None
        return hello

    def _disagreement(self, peer_encrypts: bool) -> str:
        """Why this endpoint's pulls are refused ("": they are not): the two sides disagree on encryption."""
        if peer_encrypts == (self._sealer is not None):
            return ""
        log.warning("a UCX peer %s KV and this kvxfer %s: its pulls are refused",
                    _on_off(peer_encrypts), _on_off(not peer_encrypts))
        return (f"KV encryption differs between the kvxfers of this pull: source {_on_off(not peer_encrypts)}, "
                f"destination {_on_off(peer_encrypts)} (--encrypt-kv must be the same on every kvxfer)")

    async def _serve_one(self, ep: ucxx.Endpoint, order: PullOrder | RangeOrder, buf: np.ndarray,
                         refusal: str) -> bool:
        try:
            if refusal:
                raise XferError(Failure.MISCONFIGURED, refusal)
            grant = await self._source.open_pull(order)
        except XferError as e:
            await self._ucx.send(ep, _encode({"ok": False, "failure": e.failure.name, "message": str(e)}), REPLY_TAG)
            return True
        ok = False
        try:
            slots = asyncio.Semaphore(STAGED_IN_FLIGHT)
            pull_id = order.pull_id.encode()
            # frames first: their rendezvous requests go out before the reply's send
            sends, nbytes, nframes = _post_parts(
                grant.parts, order.pack, lambda part, f, tag: self._ucx.send(ep, part.view(f.first), tag),
                lambda *iov: self._ucx.send_iov(ep, *iov),
                lambda part, tag, f: self._send_packed(ep, tag, f, part, slots),
                None if self._sealer is None else lambda part, tag, f: self._send_sealed(ep, tag, f, part, slots, pull_id))
            reply = {"ok": True, "nbytes": nbytes, "nframes": nframes, "crc": grant.crc}
            sends.append(self._ucx.send(ep, _encode(reply), REPLY_TAG))
            await _all(sends)
            await self._ucx.recv(ep, buf, ORDER_TAG)
            ok = _decode(buf)["ok"]
            return True
        except Exception as e:
            log.warning("pull of lease %s from this host failed: %s", order.lease_id, e)
            return False
        finally:
            self._source.close_pull(order, ok)

    async def _send_packed(self, ep: ucxx.Endpoint, tag: int, frame: Frame, src: PoolRanges,
                           slots: asyncio.Semaphore) -> None:
        async with slots:
            buf = self._staging.get()
            src.pack(frame.first, frame.count, buf)  # cheaper than a thread hop
            await self._ucx.send(ep, buf[:frame.nbytes], tag)
            self._staging.put(buf)  # not after a failure: an aborted request may still hold it

    async def _send_sealed(self, ep: ucxx.Endpoint, tag: int, frame: Frame, src: PoolRanges,
                           slots: asyncio.Semaphore, pull_id: bytes) -> None:
        async with slots:
            await self._sealer.send(lambda buf: self._ucx.send(ep, buf, tag), src, frame, pull_id, tag)


class UcxPuller:
    """The destination side: pulls over pooled endpoints to source kvxfers."""

    def __init__(self, ucx: UcxLoop, connect_timeout_s: float, token: str = "", sealer: Sealer | None = None) -> None:
        self._ucx = ucx
        self._connect_timeout_s = connect_timeout_s
        self._sealer = sealer  # None: frames travel in clear
        self._hello = _encode({"token": token, "encrypt": sealer is not None})
        self._idle: dict[tuple[str, int], list[ucxx.Endpoint]] = {}
        self._staging = Staging()

    async def pull(self, peer: tuple[str, int], order: PullOrder | RangeOrder, dst: list[PoolRanges],
                   verify: Callable[[int | None], Awaitable[None]]) -> None:
        """Receive the order's ranges into dst (part after part); verify(source crc) before acknowledging."""
        if self._sealer is not None:
            order = dataclasses.replace(order, pull_id=secrets.token_hex(16))
        ep = await self._acquire(peer)
        try:
            crc = await self._exchange(ep, order, dst)
        except XferError:
            raise  # the source refused, its counts differ or a chunk failed to open: the exchange aborted the endpoint
        except BaseException as e:
            self._ucx.abort(ep)  # cancels receives still writing into the destination pool
            if isinstance(e, Exception) and not isinstance(e, TimeoutError):
                raise XferError(Failure.UNAVAILABLE, f"connection to source kvxfer {peer[0]}:{peer[1]} failed: "
                                                     f"{type(e).__name__}: {e}") from e
            raise
        try:
            await verify(crc)
        except XferError:
            self._ack_soon(peer, ep, ok=False)  # in step with the source: the endpoint is reused
            raise
        except BaseException:
            self._ucx.abort(ep)
            raise
        self._ack_soon(peer, ep, ok=True)

    async def _exchange(self, ep: ucxx.Endpoint, order: PullOrder | RangeOrder, dst: list[PoolRanges]) -> int | None:
        """Receive the frames; the source's crc once they are all in."""
        slots = asyncio.Semaphore(2 * STAGED_IN_FLIGHT)  # both sides take slots in frame order: no deadlock
        reply_buf = np.empty(REPLY_BYTES, dtype=np.uint8)
        pull_id = order.pull_id.encode()
        posted: list[asyncio.Future] = []
        try:
            posted.append(reply := self._ucx.recv(ep, reply_buf, REPLY_TAG))
            receives, expected, nframes = _post_parts(
                dst, order.pack, lambda part, f, tag: self._ucx.recv(ep, part.view(f.first), tag),
                lambda *iov: self._ucx.recv_iov(ep, *iov),
                lambda part, tag, f: self._recv_packed(ep, tag, f, part, slots),
                None if self._sealer is None else lambda part, tag, f: self._recv_sealed(ep, tag, f, part, slots, pull_id))
            posted += receives
            posted.append(self._ucx.send(ep, encode_order(order), ORDER_TAG))
            if isinstance(order, RangeOrder) and (body := range_body(order)).size:
                posted.append(self._ucx.send(ep, body, ORDER_TAG))
            await reply
            answer = _decode(reply_buf)
            if not answer["ok"]:
                self._ucx.abort(ep)  # the frame receives are posted: only closing the endpoint withdraws them
                raise XferError(Failure[answer["failure"]], answer["message"])
            if answer["nbytes"] != expected or answer["nframes"] != nframes:
                self._ucx.abort(ep)
                raise XferError(Failure.DATA_LOSS, f"source offers {answer['nbytes']} bytes in {answer['nframes']} "
                                                   f"frames, destination expects {expected} in {nframes}")
            try:
                await _all(posted)
            except XferError:  # a chunk failed to open: the source is still sending, and awaits an ack
                self._ucx.abort(ep)
                raise
        except BaseException:
            await _cancel(posted)
            raise
        return answer["crc"]

    def _ack_soon(self, peer: tuple[str, int], ep: ucxx.Endpoint, ok: bool) -> None:
        """Ack on the next loop turn, once the caller has its answer (the Pull reply goes out first), and
        only then reuse the endpoint: its next order must queue behind the ack."""
        asyncio.get_running_loop().call_soon(self._ack, peer, ep, ok)

    def _ack(self, peer: tuple[str, int], ep: ucxx.Endpoint, ok: bool) -> None:
        try:
            self._ucx.send(ep, _encode({"ok": ok}), ORDER_TAG).add_done_callback(_ack_sent)
        except Exception as e:  # the pull itself is over: the source keeps the lease till expiry
            log.warning("ack of a pull was not sent: %s", e)
        self._put_back(peer, ep)

    async def _recv_packed(self, ep: ucxx.Endpoint, tag: int, frame: Frame, dst: PoolRanges,
                           slots: asyncio.Semaphore) -> None:
        async with slots:
            buf = self._staging.get()
            await self._ucx.recv(ep, buf[:frame.nbytes], tag)
            dst.unpack(frame.first, frame.count, buf)  # cheaper than a thread hop
            self._staging.put(buf)  # not after a failure: an aborted request may still hold it

    async def _recv_sealed(self, ep: ucxx.Endpoint, tag: int, frame: Frame, dst: PoolRanges,
                           slots: asyncio.Semaphore, pull_id: bytes) -> None:
        async with slots:
            await self._sealer.recv(lambda buf: self._ucx.recv(ep, buf, tag), dst, frame, pull_id, tag)

    async def _acquire(self, peer: tuple[str, int]) -> ucxx.Endpoint:
        idle = self._idle.get(peer, [])
        while idle:
            ep = idle.pop()
            if not ep.closed:
                return ep
        try:
            ep = await asyncio.wait_for(self._ucx.connect(peer[0], peer[1], self._connect_timeout_s),
                                        self._connect_timeout_s)
            await self._ucx.send(ep, self._hello, ORDER_TAG)  # before any order: the source checks it first
            return ep
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


def _scatter_gather(ranges: PoolRanges) -> bool:
    """Whether this side moves packed frames as scatter-gather messages (host pools, helper built)."""
    return not ranges.pool.on_gpu and helper() is not None


def _post_parts(parts: list[PoolRanges], pack: bool, single: Callable[[PoolRanges, Frame, int], Awaitable[None]],
                batch: Callable[..., Awaitable[None]], staged: Callable[[PoolRanges, int, Frame], Awaitable[None]],
                sealed: Callable[[PoolRanges, int, Frame], Awaitable[None]] | None) -> tuple[list[Awaitable[None]], int, int]:
    """Post every frame's send or receive, part after part, frame tags running on across parts (both sides plan
    the same frames): `single(part, frame, tag)` for a single range of a pool; a part's packed frames as one
    scatter-gather `batch(*_iov_messages(...))` where this side can, else each through a staging buffer
    (`staged(part, tag, frame)`); with encryption on, every frame, packed, as a sealed chunk (`sealed(part, tag,
    frame)`). Returns what was posted, and the bytes and frames in all."""
    posted: list[Awaitable[None]] = []
    tag = FRAME_TAG
    nbytes = 0
    for part in parts:
        if sealed is not None:
            part = chunked(part)
        frames = plan_frames(part.lengths, pack or sealed is not None)
        tagged = [(tag + i, f) for i, f in enumerate(frames)]
        tag += len(frames)
        nbytes += sum(f.nbytes for f in frames)
        if sealed is not None:
            posted += [asyncio.ensure_future(sealed(part, t, f)) for t, f in tagged]
            continue
        posted += [single(part, f, t) for t, f in tagged if not f.packed]
        packed = [(t, f) for t, f in tagged if f.packed]
        if packed and _scatter_gather(part):
            posted.append(batch(*_iov_messages(packed, part)))
        elif packed:
            posted += [asyncio.ensure_future(staged(part, t, f)) for t, f in packed]
    return posted, nbytes, tag - FRAME_TAG


def _iov_messages(packed: list[tuple[int, Frame]], ranges: PoolRanges) -> tuple:
    """send_iov/recv_iov arguments for these (tag, frame) pairs: tags, pool, counts, offsets, lengths."""
    parts = [ranges.part(frame.first, frame.count) for _, frame in packed]
    offsets = np.concatenate([at for at, _ in parts])
    lengths = np.concatenate([size for _, size in parts])
    return [t for t, _ in packed], ranges.pool.data, [f.count for _, f in packed], offsets, lengths


async def _all(futures: list[asyncio.Future]) -> None:
    """Await each in turn (a gather costs loop turns); if one fails, cancel the rest and let them end."""
    try:
        for future in futures:
            await future
    except BaseException:
        await _cancel(futures)
        raise


async def _cancel(futures: list[asyncio.Future]) -> None:
    """Cancel what is pending (a cancelled send or receive stays posted until its endpoint is aborted)
    and wait for it to end, so that no frame task outlives its pull."""
    for future in futures:
        future.cancel()
    await asyncio.gather(*futures, return_exceptions=True)


def _on_off(on: bool) -> str:
    return "encrypts" if on else "does not encrypt"


def _ack_sent(sent: asyncio.Future) -> None:
    if not sent.cancelled() and sent.exception() is not None:  # the source keeps the lease till expiry
        log.warning("ack of a pull was not delivered: %s", sent.exception())
