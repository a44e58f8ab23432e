"""Environment variables set for a block of this process (while it starts or dials services that read them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ inside the block; each variable's earlier value (or absence) restored after it."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
