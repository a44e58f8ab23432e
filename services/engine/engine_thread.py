"""Runs an engine on its own thread so an event loop never waits on a tensor operation.

Callers submit commands (functions of the engine) and get futures; step outputs go to a callback.
A step that raises leaves the engine in an unknown state: the worker stops, fails every pending and
later command, and tells its owner through `on_error` (an instance then stops serving).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from typing import Any, TypeVar

from services.common.errors import EngineFailed
from services.engine.engine import LLMEngine, StepOutput

log = logging.getLogger(__name__)
T = TypeVar("T")


class EngineThread:
    def __init__(self, engine: LLMEngine, on_outputs: Callable[[list[StepOutput]], object],
                 on_error: Callable[[BaseException], object] = lambda exc: None) -> None:
        self.engine = engine
        self._on_outputs = on_outputs
        self._on_error = on_error
        self._inbox: queue.SimpleQueue[tuple[Callable[[LLMEngine], Any], Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.steps = 0
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def call(self, fn: Callable[[LLMEngine], T]) -> Future[T]:
        """Runs `fn(engine)` on the engine thread between steps."""
        future: Future[T] = Future()
        if self.error is not None:
            future.set_exception(EngineFailed(f"engine failed: {self.error!r}"))
        else:
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
            if self.error is not None:
                _settle(future, exception=EngineFailed(f"engine failed: {self.error!r}"))
                continue
            try:
                result = fn(self.engine)
            except Exception as exc:  # the caller sees it through the future
                _settle(future, exception=exc)
            else:
                _settle(future, result)
            block = False

    def _run(self) -> None:
        running = True
        began: float | None = None  # perf_counter at the start of the step whose period is still open
        while running:
            idle = not self.engine.has_work() or self.error is not None
            if idle and began is not None:
                self._log_step(began)
                began = None
            running = self._drain(block=idle)
            if running and self.error is None and self.engine.has_work():
                if began is not None:
                    self._log_step(began)
                began = time.perf_counter()
                try:
                    outputs = self.engine.step()
                except Exception as exc:
                    log.exception("engine step failed; the engine stops serving")
                    self.error = exc
                    self._on_error(exc)
                    began = None
                    continue
                self.steps += 1
                if outputs:
                    self._on_outputs(outputs)

    def _log_step(self, began: float) -> None:
        """Logs the latest step with its period in service, which ends now."""
        step = self.engine.last_step
        if step is not None:
            self.engine.step_log.add(replace(step, seconds=time.perf_counter() - began))


def _settle(future: Future, result: object = None, exception: BaseException | None = None) -> None:
    """Completes a command's future unless its caller cancelled it meanwhile (the command ran all the same:
    an admission is then undone by the abort that follows it, and a free still frees)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass
