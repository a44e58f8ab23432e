"""The private parts of ucxx that kvxfer relies on, in one place (ucxx-cu12 pinned exactly in pyproject.toml).

ucx_loop.py drives UCX progress from the asyncio loop and screens connection requests before an endpoint
exists; ucxx's public API offers neither, so it reaches below it here and only here. An upgrade of ucxx must
pass tests/unit/kvxfer/test_ucxx_private.py, which checks every name and shape used below.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

import ucxx
from ucxx._lib.arr import Array
from ucxx._lib.libucxx import UCXCloseError, UCXListener
from ucxx._lib_async.application_context import ProgressTasks
from ucxx._lib_async.listener import Listener, _listener_handler, _ListenerHandlerTracker
from ucxx._lib_async.utils import hash64bits
from ucxx.types import Tag, TagMaskFull

UCXX_VERSION = "0.52.0"  # the version whose internals these are: the pin in pyproject.toml

__all__ = ["Array", "Tag", "TagMaskFull", "UCXCloseError", "UCXX_VERSION", "claim_progress", "endpoint_tag",
           "screened_listener", "tag_within", "ucp_endpoint", "worker"]


def claim_progress(loop: asyncio.AbstractEventLoop, owner: object) -> None:
    """Marks `loop` as progressed by `owner`, so that ucxx starts no progress task of its own on it."""
    ProgressTasks[loop] = owner


def worker():
    """The application context's UCXWorker (`init_blocking_progress_mode`, `epoll_file_descriptor`, `progress`,
    `arm`, `handle`)."""
    return ucxx.core._get_ctx().worker


def endpoint_tag(ep: ucxx.Endpoint, send: bool) -> int:
    """The endpoint's own tag for its sends (or receives), that `tag_within` combines ours with."""
    return ep._tags["msg_send" if send else "msg_recv"]


def tag_within(endpoint_tag: int, tag: int) -> Tag:
    """Our tag within the endpoint's, as ucxx's Endpoint.send/recv make it."""
    return Tag(hash64bits(endpoint_tag, hash(tag)))


def ucp_endpoint(ep: ucxx.Endpoint):
    """The endpoint's open UCXEndpoint (`tag_send`, `tag_recv`, `handle`), its errors raised."""
    if ep.closed:
        raise UCXCloseError("Endpoint closed")
    ep._ep.raise_on_error()
    return ep._ep


def screened_listener(loop: asyncio.AbstractEventLoop, port: int, handler: Callable[[ucxx.Endpoint], Awaitable[None]],
                      on_request: Callable[[int, int], bool], connect_timeout_s: float) -> ucxx.Listener:
    """As ucxx.create_listener, with each connection request first passed to `on_request(listener_ptr, request)`:
    an endpoint is made only when it returns True (else it has refused the request itself)."""
    ctx = ucxx.core._get_ctx()
    tracker = _ListenerHandlerTracker()
    made: list[weakref.ref] = []  # the UCX listener, weakly: its callback must not keep it open

    def on_conn_request(request: int) -> None:
        listener = made[0]()
        if listener is None or not on_request(listener.ucxx_ptr, request):
            return
        ep = listener.create_endpoint_from_conn_request(request, True)
        _listener_handler(ep, loop, handler, weakref.ref(ctx), True, connect_timeout_s, tracker)

    raw = UCXListener.create(worker=ctx.worker, port=port, cb_func=on_conn_request, deliver_endpoint=False)
    made.append(weakref.ref(raw))
    return Listener(raw, tracker, ctx)
