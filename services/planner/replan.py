"""The replanning loop: watch the recorded workload, replan on a significant shift, store and apply the plan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis

from services.common.registry import read_records, save_plan, stored_model
from services.planner.actuation import Actuation, Actuator, apply_placement
from services.planner.records import RecordedWorkload, fit_records
from services.planner.schemas import ReplanRequest
from services.planner.search import PlanResult
from services.planner.service import replan_request, run_plan

log = logging.getLogger(__name__)
# watched statistic → the scale below which a change counts as absolute (a CV near 0 is as bursty as 1; a hit rate
# near 0 moves the prefill load by its absolute change)
WATCHED = {"rate": 1e-9, "prompt_mean": 1.0, "output_mean": 1.0, "arrival_cv": 1.0, "hit_rate": 0.4}


def shift(before: dict, after: dict, threshold: float) -> list[str]:
    """The watched statistics that moved by more than `threshold`, relative to their former value (those that
    either side lacks are not compared)."""
    return [key for key, floor in WATCHED.items() if key in before and key in after
            and abs(after[key] - before[key]) > threshold * max(abs(before[key]), floor)]


@dataclass(slots=True)
class Replanner:
    client: redis.Redis
    request: ReplanRequest  # model, hardware, cluster, SLO and algorithm to plan with
    actuator: Actuator | None = None
    threshold: float = 0.25  # relative change of a watched statistic that triggers a replan
    min_records: int = 50
    workers: int | None = None
    baseline: dict | None = None  # workload statistics the current plan was made for
    on_plan: Callable[[dict], None] | None = None
    fitted: bool = True  # plan with the stack's online fit (ds:model) where there is one; the hardware seeds it

    def replan(self, recorded: RecordedWorkload) -> tuple[dict, PlanResult]:
        """Plan for the recorded workload at its rate, or for the best goodput per GPU where that rate cannot be
        served; store it at `ds:plan` (with the latency model that made it)."""
        req = replan_request(self.request, recorded)
        if self.actuator is not None:  # what it plans is launched: layouts the engine runs only
            req = req.model_copy(update={"launchable": True})
        fit = stored_model(self.client) if self.fitted else None
        try:
            plan, result, _ = run_plan(req, self.workers, fit)
        except ValueError as err:
            if req.rate is None:
                raise
            log.warning("replanning for the best goodput per GPU: %s", err)
            plan, result, _ = run_plan(req.model_copy(update={"rate": None}), self.workers, fit)
        plan["workload"] = recorded.as_dict()
        save_plan(self.client, plan)
        if self.on_plan is not None:
            self.on_plan(plan)
        self.baseline = recorded.as_dict()
        return plan, result

    def check(self) -> tuple[dict, Actuation | None] | None:
        """Replan (and apply) when the workload moved from the baseline; None when nothing changed."""
        records = read_records(self.client, self.request.max_records)
        if len(records) < self.min_records:
            return None
        recorded = fit_records(records)
        if self.baseline is not None:
            moved = shift(self.baseline, recorded.as_dict(), self.threshold)
            if not moved:
                return None
            log.info("workload shifted (%s): replanning", ", ".join(moved))
        plan, result = self.replan(recorded)
        return plan, self.apply(result)

    def apply(self, result: PlanResult) -> Actuation | None:
        """Scale the deployment to the plan when an actuator is attached."""
        return apply_placement(self.actuator, result.placement) if self.actuator is not None else None

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Check every `interval` seconds until `stop` is set; the search runs off the event loop."""
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.check)
            except (ValueError, redis.RedisError) as err:
                log.warning("replanning skipped: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
