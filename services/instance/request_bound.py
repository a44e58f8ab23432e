"""The bound on an instance's requests: past it a request is refused (RESOURCE_EXHAUSTED) rather than queued. (Not
"admission": that word names the router's SLO gate, services/router/admission.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from services.common.errors import Overloaded


class RequestBound:
    def __init__(self, limit: int, queue: str) -> None:
        self.limit = limit
        self.queue = queue  # named in the refusal
        self.pending = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Holds one of the `limit` places while a request is queued or running; Overloaded when none is free."""
        if self.pending >= self.limit:
            raise Overloaded(f"{self.queue} queue full ({self.pending} requests)")
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1
