"""UCX progress on the asyncio loop: the ucxx worker in blocking mode, its epoll fd watched by the
loop. A wake progresses the worker, completes the futures of finished requests and re-arms the
worker; while events keep coming it progresses once per loop turn, and while nothing happens it
costs nothing.

A small-message round trip takes a fraction of what it takes with ucxx's Python futures (completed by its
notifier thread: two thread hops per request). ucxx's own blocking mode awaits every request with asyncio.sleep(0) polls instead: a
listener waiting for the next order would spin at 100% CPU.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import ucxx

from services.kvxfer.ucx.conn_filter import client_address, reject
from services.kvxfer.ucx.iov import IovMessages, IovRequest
from services.kvxfer.ucx.ucxx_private import (
    Array,
    Tag,
    TagMaskFull,
    claim_progress,
    endpoint_tag,
    screened_listener,
    tag_within,
    ucp_endpoint,
    worker,
)

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0  # ucxx's own bound on a new endpoint's exchange of peer information


class UcxLoop:
    """Tagged sends and receives on ucxx endpoints as futures of the event loop. One per process,
    created in its event loop before any other ucxx call."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        claim_progress(self._loop, self)  # ucxx starts no progress task of its own on this loop
        ucxx.init(progress_mode="blocking", enable_python_future=False, enable_delayed_submission=False)
        self._worker = worker()
        self._worker.init_blocking_progress_mode()
        self._pending: list[tuple[object, asyncio.Future, Array | None]] = []  # (request, its future, its buffer)
        self._scheduled = False
        self._loop.add_reader(self._worker.epoll_file_descriptor, self._step)
        self.kick()

    def listen(self, handler: Callable[[ucxx.Endpoint], Awaitable[None]], port: int,
               admit: Callable[[str], bool] | None = None) -> ucxx.Listener:
        """A listener calling handler(endpoint) for each connection (port 0: any free port). `admit(client ip)`:
        a connection request it refuses is rejected before an endpoint exists (conn_filter.py; its helper must
        be built). As ucxx's create_listener, with the request screened before the endpoint is made."""
        if admit is None:
            return ucxx.create_listener(handler, port=port)

        def on_request(listener_ptr: int, request: int) -> bool:
            ip = client_address(request)
            if ip is None or not admit(ip):
                reject(listener_ptr, request)
                log.warning("UCX connection from %s refused: not an allowed peer address", ip)
                return False
            return True

        return screened_listener(self._loop, port, handler, on_request, CONNECT_TIMEOUT_S)

    async def connect(self, host: str, port: int, timeout_s: float) -> ucxx.Endpoint:
        """An endpoint to the listener at host:port."""
        try:
            return await ucxx.create_endpoint(host, port, connect_timeout=timeout_s)
        finally:
            self.kick()  # ucxx progressed the worker itself

    def abort(self, ep: ucxx.Endpoint) -> None:
        """Close the endpoint at once; its posted requests fail (as cancelled)."""
        ep.abort()
        for request, _, _ in self._pending:  # UCP's receives belong to the worker: withdraw the endpoint's own
            if isinstance(request, IovRequest) and request.receive and request.ep is ep:
                request.cancel(self._worker.handle)
        self.kick()  # ucxx progressed the worker itself

    def send(self, ep: ucxx.Endpoint, buf: object, tag: int) -> asyncio.Future:
        """Post a send of buf; the future is done once buf may be reused."""
        arr = Array(buf)
        return self._track(ucp_endpoint(ep).tag_send(arr, _tag(endpoint_tag(ep, True), tag)), arr)

    def recv(self, ep: ucxx.Endpoint, buf: object, tag: int) -> asyncio.Future:
        """Post a receive into buf; the future is done once the message is in."""
        arr = Array(buf)
        return self._track(ucp_endpoint(ep).tag_recv(arr, _tag(endpoint_tag(ep, False), tag), TagMaskFull), arr)

    def send_iov(self, ep: ucxx.Endpoint, tags: Sequence[int], pool: np.ndarray, counts: Sequence[int],
                 offsets: Sequence[int], lengths: Sequence[int]) -> asyncio.Future:
        """Post sends of the pool's ranges, counts[i] of them as message i with our tag tags[i] (iov.py); done
        once all may be reused."""
        handle = ucp_endpoint(ep).handle
        messages = IovMessages([_tag(endpoint_tag(ep, True), t).value for t in tags], counts, offsets, lengths)
        return self._track(IovRequest.send(handle, ep, pool, messages), None)

    def recv_iov(self, ep: ucxx.Endpoint, tags: Sequence[int], pool: np.ndarray, counts: Sequence[int],
                 offsets: Sequence[int], lengths: Sequence[int]) -> asyncio.Future:
        """Post receives of messages into the pool's ranges, as send_iov sent them; done once all are in."""
        ucp_endpoint(ep)  # the endpoint is open
        messages = IovMessages([_tag(endpoint_tag(ep, False), t).value for t in tags], counts, offsets, lengths)
        return self._track(IovRequest.recv(self._worker.handle, ep, pool, messages), None)

    def kick(self) -> None:
        """Progress soon (and settle requests that finished while ucxx progressed the worker itself)."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._step)

    def close(self) -> None:
        """Stop watching the worker (the process is leaving)."""
        self._loop.remove_reader(self._worker.epoll_file_descriptor)

    def _track(self, request, arr: Array | None) -> asyncio.Future:
        future = self._loop.create_future()
        if request.completed:
            _settle(request, future)
        else:
            self._pending.append((request, future, arr))  # arr keeps the buffer alive while UCX uses it
            self.kick()
        return future

    def _step(self) -> None:
        self._scheduled = False
        self._worker.progress()
        if self._pending:
            pending, self._pending = self._pending, []
            for entry in pending:  # kept till its request ends, cancelled future or not (the buffer with it)
                if entry[0].completed:
                    _settle(entry[0], entry[1])
                else:
                    self._pending.append(entry)
        if not self._worker.arm():  # events arrived since the progress: go on after other tasks had a turn
            self.kick()


def _settle(request, future: asyncio.Future) -> None:
    if future.done():
        return
    try:
        request.check_error()
    except Exception as e:
        future.set_exception(e)
        future.exception()  # marks it retrieved: a request abandoned with its endpoint fails unheard
    else:
        future.set_result(None)


@functools.lru_cache(maxsize=4096)
def _tag(endpoint: int, tag: int) -> Tag:
    """Our tag within the endpoint's (a SHA-1: cached)."""
    return tag_within(endpoint, tag)
