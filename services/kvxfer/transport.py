"""Cross-host pulls over UCX (ucxx): the source kvxfer sends ranges of its mapped pools, the
destination kvxfer receives them straight into its pool (no staging copy on either side).

An endpoint carries one pull at a time (idle endpoints are kept per peer and reused), so a failed
or timed-out pull aborts only its own endpoint, which cancels its receives before the failure is
reported. Per pull: request -> reply (ok, bytes, ranges, crc) -> one tagged message per range ->
ack; the source releases the lease on an ok ack and keeps it otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict

import ucxx

from services.kvxfer.errors import Failure, XferError
from services.kvxfer.orders import PullOrder, PullSource

log = logging.getLogger(__name__)
IDLE_PER_PEER = 16


def _encode(message: dict) -> bytearray:
    return bytearray(json.dumps(message).encode())


def _decode(data: bytearray) -> dict:
    return json.loads(bytes(data))


class UcxServer:
    """The source side: a UCX listener serving pull orders from this host's pools."""

    def __init__(self, source: PullSource) -> None:
        self._source = source
        self._listener: ucxx.Listener | None = None

    def start(self, port: int) -> int:
        self._listener = ucxx.create_listener(self._serve, port=port)
        return self._listener.port

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def _serve(self, ep: ucxx.Endpoint) -> None:
        while True:
            try:
                order = PullOrder(**_decode(await ep.recv_obj()))
            except Exception:  # the peer closed or aborted this endpoint
                return
            if not await self._serve_one(ep, order):
                ep.abort()
                return

    async def _serve_one(self, ep: ucxx.Endpoint, order: PullOrder) -> bool:
        try:
            grant = await self._source.open_pull(order)
        except XferError as e:
            await ep.send_obj(_encode({"ok": False, "failure": e.failure.name, "message": str(e)}))
            return True
        ok = False
        try:
            nbytes = sum(v.nbytes for v in grant.views)
            await ep.send_obj(_encode({"ok": True, "nbytes": nbytes, "nranges": len(grant.views), "crc": grant.crc}))
            await asyncio.gather(*(ep.send(view, tag=i) for i, view in enumerate(grant.views)))
            ok = _decode(await ep.recv_obj())["ok"]
            return True
        except Exception as e:
            log.warning("pull of lease %s from this host failed: %s", order.lease_id, e)
            return False
        finally:
            self._source.close_pull(order, ok)


class UcxPuller:
    """The destination side: pulls over pooled endpoints to source kvxfers."""

    def __init__(self, connect_timeout_s: float) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[ucxx.Endpoint]] = {}

    async def pull(self, peer: tuple[str, int], order: PullOrder, dst_views: Sequence,
                   verify: Callable[[int | None], Awaitable[None]]) -> None:
        """Receive the order's ranges into dst_views; verify(source crc) before acknowledging."""
        ep = await self._acquire(peer)
        try:
            await self._exchange(ep, order, dst_views, verify)
        except XferError:
            self._put_back(peer, ep)  # kept only if the exchange ended in step with the source
            raise
        except BaseException as e:
            ep.abort()  # cancels receives still writing into the destination pool
            if isinstance(e, Exception) and not isinstance(e, TimeoutError):
                raise XferError(Failure.UNAVAILABLE, f"connection to source kvxfer {peer[0]}:{peer[1]} failed: "
                                                     f"{type(e).__name__}: {e}") from e
            raise
        self._put_back(peer, ep)

    @staticmethod
    async def _exchange(ep: ucxx.Endpoint, order: PullOrder, dst_views: Sequence,
                        verify: Callable[[int | None], Awaitable[None]]) -> None:
        await ep.send_obj(_encode(asdict(order)))
        reply = _decode(await ep.recv_obj())
        if not reply["ok"]:
            raise XferError(Failure[reply["failure"]], reply["message"])
        expected = sum(v.nbytes for v in dst_views)
        if reply["nbytes"] != expected or reply["nranges"] != len(dst_views):
            ep.abort()
            raise XferError(Failure.DATA_LOSS, f"source offers {reply['nbytes']} bytes in {reply['nranges']} "
                                               f"ranges, destination expects {expected} in {len(dst_views)}")
        await asyncio.gather(*(ep.recv(view, tag=i) for i, view in enumerate(dst_views)))
        try:
            await verify(reply["crc"])
        except XferError:
            await ep.send_obj(_encode({"ok": False}))
            raise
        await ep.send_obj(_encode({"ok": True}))

    async def _acquire(self, peer: tuple[str, int]) -> ucxx.Endpoint:
        idle = self._idle.get(peer, [])
        while idle:
            ep = idle.pop()
            if not ep.closed:
                return ep
        try:
            return await asyncio.wait_for(
                ucxx.create_endpoint(peer[0], peer[1], connect_timeout=self._connect_timeout_s),
                self._connect_timeout_s)
        except Exception as e:
            raise XferError(Failure.UNAVAILABLE, f"cannot connect to source kvxfer UCX {peer[0]}:{peer[1]}: "
                                                 f"{type(e).__name__}: {e}") from e

    def _put_back(self, peer: tuple[str, int], ep: ucxx.Endpoint) -> None:
        idle = self._idle.setdefault(peer, [])
        if len(idle) < IDLE_PER_PEER and not ep.closed:
            idle.append(ep)
        else:
            ep.abort()

    def close(self) -> None:
        for idle in self._idle.values():
            for ep in idle:
                ep.abort()
        self._idle.clear()
