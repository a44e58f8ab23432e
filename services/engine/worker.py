"""Runs an engine on its own thread so an event loop never waits on a tensor operation.

Callers submit commands (functions of the engine) and get futures; step outputs go to a callback.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from services.engine.engine import LLMEngine, StepOutput

log = logging.getLogger(__name__)
T = TypeVar("T")


class EngineWorker:
    def __init__(self, engine: LLMEngine, on_outputs: Callable[[list[StepOutput]], None]) -> None:
        self.engine = engine
        self._on_outputs = on_outputs
        self._inbox: queue.SimpleQueue[tuple[Callable[[LLMEngine], Any], Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.steps = 0

    def start(self) -> None:
        self._thread.start()

    def call(self, fn: Callable[[LLMEngine], T]) -> Future[T]:
        """Runs `fn(engine)` on the engine thread between steps."""
        future: Future[T] = Future()
        self._inbox.put((fn, future))
        return future

    def stop(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=30)

    def _drain(self, block: bool) -> bool:
        """Applies queued commands; False once stop was asked."""
        while True:
            try:
                item = self._inbox.get(block=block, timeout=0.5 if block else None)
            except queue.Empty:
                return True
            if item is None:
                return False
            fn, future = item
            try:
                future.set_result(fn(self.engine))
            except Exception as exc:  # the caller sees it through the future
                future.set_exception(exc)
            block = False

    def _run(self) -> None:
        running = True
        while running:
            running = self._drain(block=not self.engine.has_work())
            if running and self.engine.has_work():
                try:
                    outputs = self.engine.step()
                except Exception:
                    log.exception("engine step failed")
                    raise
                self.steps += 1
                if outputs:
                    self._on_outputs(outputs)
