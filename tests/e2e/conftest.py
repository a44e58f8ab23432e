"""The plain stack of each mode, shared by the modules that serve through it (test_serving, test_openai_modes,
test_openai): a module that needs its own settings defines its own `stack` fixture instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.launcher.stack import Stack
from tests.e2e.helpers import running_stack

# Its own Redis database: the stack of the last mode outlives its modules, and other stacks flush theirs.
SHARED_DB = 5


@pytest.fixture(scope="session", params=["disagg", "colocated", "chunked"])
def stack(request, tiny_llama_dir: str, redis_url: str) -> Iterator[Stack]:
    with running_stack(tiny_llama_dir, f"{redis_url.rsplit('/', 1)[0]}/{SHARED_DB}", mode=request.param) as stack:
        yield stack
