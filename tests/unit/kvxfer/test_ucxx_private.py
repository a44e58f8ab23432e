"""The ucxx internals kvxfer relies on (services/kvxfer/ucx/ucxx_private.py) are there, in the shape it uses: an
upgrade of ucxx that moves or reshapes one fails here, naming it, before any pull does."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def check_internals() -> None:
    """Run in a child process: importing ucxx reads the UCX environment once, which this test must not set."""
    import inspect
    from importlib.metadata import version

    from ucxx._lib.libucxx import UCXEndpoint, UCXListener, UCXWorker
    from ucxx._lib_async.endpoint import Endpoint
    from ucxx._lib_async.listener import Listener, _listener_handler

    from services.kvxfer.ucx import ucxx_private

    assert version("ucxx-cu12") == ucxx_private.UCXX_VERSION, (version("ucxx-cu12"), ucxx_private.UCXX_VERSION)
    params = list(inspect.signature(_listener_handler).parameters)
    assert params == ["conn_request", "event_loop", "callback_func", "ctx_ref", "endpoint_error_handling",
                      "connect_timeout", "handler_tracker"], params
    assert list(inspect.signature(Listener.__init__).parameters) == ["self", "listener", "handler_tracker", "ctx"]
    for cls, names in ((UCXListener, ("create", "create_endpoint_from_conn_request", "ucxx_ptr")),
                       (UCXEndpoint, ("tag_send", "tag_recv", "handle", "raise_on_error")),
                       (UCXWorker, ("init_blocking_progress_mode", "epoll_file_descriptor", "progress", "arm", "handle"))):
        missing = [n for n in names if not hasattr(cls, n)]
        assert not missing, (cls.__name__, missing)
    source = inspect.getsource(Endpoint)
    for needed in ('hash64bits(self._tags["msg_send"], hash(tag))', 'hash64bits(self._tags["msg_recv"], hash(tag))',
                   "self._ep = ", "self._tags = "):
        assert needed in source, f"ucxx's Endpoint no longer has {needed!r}"
    assert all(hasattr(Endpoint, n) for n in ("closed", "abort")), "Endpoint.closed / abort"
    import ucxx

    assert callable(ucxx.core._get_ctx) and isinstance(ucxx._lib_async.application_context.ProgressTasks, dict)
    tag = ucxx_private.tag_within(12345, 7)
    assert isinstance(tag, ucxx_private.Tag) and tag.value == ucxx_private.hash64bits(12345, hash(7))


def test_the_private_ucxx_names_kvxfer_uses_are_there_in_the_shape_it_uses() -> None:
    done = subprocess.run([sys.executable, "-c", "from tests.unit.kvxfer.test_ucxx_private import check_internals; "
                           "check_internals()"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_pin_is_exact_and_names_the_adapters_version() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("ucxx-cu12")]
    adapter = (ROOT / "services" / "kvxfer" / "ucx" / "ucxx_private.py").read_text()
    assert pin.startswith("ucxx-cu12==") and f'UCXX_VERSION = "{pin.split("==")[1]}"' in adapter, pin
