"""Runs a step's forward pass so that one request that makes it fail fails alone.

A batch that raises is run again one sequence at a time: the sequences that pass go on as if the batch had
run (a pass writes only their own K/V slots, and nothing advances before it returns), the ones that raise
alone are the culprits. When every sequence of a batch fails alone the fault is the engine's, not a request's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from services.engine.sampler import Sampled
from services.engine.scheduler import ScheduledSeq, SchedulerOutput

log = logging.getLogger(__name__)


class EngineBroken(RuntimeError):
    """Steps fail whatever they hold: the engine cannot serve on."""


@dataclass(slots=True)
class GuardedStep:
    batch: SchedulerOutput  # what ran
    sampled: Sampled  # a token (and its logprobs) per item of `batch` that samples
    failed: list[tuple[ScheduledSeq, BaseException]] = field(default_factory=list)


@dataclass(slots=True)
class StepGuard:
    """`max_failing_steps` consecutive steps in which nothing passed mean the engine, not requests, is at fault."""

    max_failing_steps: int = 4
    _failing_steps: int = 0

    def run(self, execute: Callable[[SchedulerOutput], Sampled], batch: SchedulerOutput,
            lost: Callable[[], str | None] = lambda: None) -> GuardedStep:
        """Runs the step; `lost()` names a part of the engine that is gone (a TP/PP rank): no request is at fault."""
        try:
            step = GuardedStep(batch, execute(batch))
        except Exception as exc:
            if (gone := lost()) is not None:
                raise EngineBroken(gone) from exc
            step = self._isolate(execute, batch, exc)
        self._failing_steps = self._failing_steps + 1 if not step.batch.items else 0
        if self._failing_steps >= self.max_failing_steps:
            raise EngineBroken(f"{self._failing_steps} steps in a row failed for every request") from step.failed[-1][1]
        return step

    @staticmethod
    def _isolate(execute: Callable[[SchedulerOutput], Sampled], batch: SchedulerOutput,
                 exc: BaseException) -> GuardedStep:
        if len(batch.items) == 1:
            log.warning("step failed for request %s: %r", batch.items[0].seq.request_id, exc)
            return GuardedStep(SchedulerOutput([]), Sampled(), [(batch.items[0], exc)])
        log.warning("step of %d requests failed (%r); running them one at a time", len(batch.items), exc)
        step = GuardedStep(SchedulerOutput([]), Sampled())
        for item in batch.items:
            try:
                alone_sampled = execute(SchedulerOutput([item]))
                step.sampled.extend(alone_sampled)
            except Exception as alone:
                log.warning("step failed for request %s: %r", item.seq.request_id, alone)
                step.failed.append((item, alone))
            else:
                step.batch.items.append(item)
        if not step.batch.items:
            raise EngineBroken(f"every request of a {len(batch.items)}-request step failed alone") from exc
        return step
