"""SLO-aware admission at the router: the fitted model from Redis, the queues at arrival, the decision
(`admission.py`), and each finished request's prediction against its measurement (`slo_metrics.py`).

No Redis call is on a request's path: the booked loads are read in the background every `loads_s` (routing reads
the same snapshot, `router/prefix_routing.py`) and this router's own bookings since that read are added
(`Dispatcher.local_load`), so a burst at one router sees its own queue grow; other routers' bookings show at the
next read.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.exceptions import RedisError

from services.common.errors import SloUnmet
from services.common.registry import Registry
from services.common.slo import SLO
from services.common.step_model.stored import FittedModel
from services.router import slo_metrics
from services.router.admission import Candidate, Placed, Policy, RecentMix, decide, predict
from services.router.dispatch import Dispatcher
from services.router.margin import ErrorWindow
from services.router.request import RouterRequest

log = logging.getLogger(__name__)


def booked_load(book: float, local: float, local_at_read: float) -> float:
    """An instance's booked load: the book's (every router's) at the last read, plus this router's own bookings
    since; at least this router's own. The book can lose an instance's entry while its requests are in flight
    (its registration lapsed under a stalled core, a dispatch dropped it, its heartbeat put it back at zero),
    and then read short by all of them until they end: the queue a newcomer waits behind looked empty."""
    return max(book + local - local_at_read, local)


def placed(req: RouterRequest) -> Placed:
    """Where routing put the request, as the prediction reads it: on a reverse pull the prefill computes what
    neither instance holds; on the local path the decode instance computes what it does not."""
    pick, route = req.prefill_pick, req.route
    if pick is None:
        return Placed()
    if route.path == "local":
        return Placed(pick.instance_id, route.decode_cached, route.decode_id, local=True)
    cached = max(pick.cached_tokens, route.decode_cached) if route.path == "reverse" else pick.cached_tokens
    return Placed(pick.instance_id, cached, route.decode_id)


class SloGate:
    def __init__(self, registry: Registry, dispatcher: Dispatcher, policy: Policy, default: SLO,
                 batch_tokens: int, errors: ErrorWindow | None = None, window: int = 200) -> None:
        self.registry = registry
        self.dispatcher = dispatcher
        self.policy = policy
        self.default = default
        self.batch_tokens = batch_tokens
        self.model: FittedModel | None = None
        self.window = slo_metrics.AttainmentWindow(window)
        self.errors = errors or ErrorWindow(0.0)  # the margin added to predictions
        self.loads: dict[str, float] = {}  # instance id → booked load at the last read (ids are role-unique)
        self.local_at_read: dict[str, float] = {}  # ... and this router's own bookings then
        self.mix = RecentMix()  # what the queued and booked loads are made of: the requests admitted lately

    async def refresh(self) -> None:
        """Reads the planner's latest fit (`ds:model`); keeps the last one while Redis is unreachable."""
        try:
            model = await self.registry.fitted_model()
        except (RedisError, OSError) as exc:
            if not self.registry.away:  # the breaker logs an outage once
                log.warning("could not read the fitted model: %s", exc)
            return
        self.model = FittedModel.from_json(model) if model else None

    async def refresh_loads(self) -> None:
        """Reads every router's booked loads (`ds:load:*`) in one round trip; on failure only this router's own
        bookings count from then on."""
        local = dict(self.dispatcher.local_load)
        try:
            loads = await self.registry.all_loads()
        except (RedisError, OSError):
            self.loads, self.local_at_read = {}, {}
            return
        self.loads = loads
        self.local_at_read = local

    async def run(self, model_s: float, loads_s: float = 0.05) -> None:
        """Re-reads the loads every `loads_s` and the model every `model_s` seconds."""
        next_model = 0.0
        while True:
            if time.monotonic() >= next_model:
                await self.refresh()
                next_model = time.monotonic() + model_s
            await self.refresh_loads()  # routing by the prefix cache reads them too
            await asyncio.sleep(loads_s)

    def candidates(self, role: str) -> list[Candidate]:
        """The live instances of a role with their booked loads (no Redis call)."""
        local, since, now = self.dispatcher.local_load, self.dispatcher.step_since, time.monotonic()
        return [Candidate(i.id, f"{role}@{i.device}",
                          booked_load(self.loads.get(i.id, 0.0), local.get(i.id, 0.0), self.local_at_read.get(i.id, 0.0)),
                          now - since[i.id] if local.get(i.id) and i.id in since else 0.0)
                for i in self.dispatcher.live(role)]

    def admit(self, req: RouterRequest, waiting: float = 0.0) -> None:
        """Predicts the request's TTFT and TPOT and decides; raises SloUnmet when it is refused. Without a fitted
        model every request is admitted unpredicted. `waiting`: the prompt tokens of the requests admitted before
        it that wait at the router for a slot (not yet booked on any instance)."""
        req.slo = (req.slo or SLO()).or_defaults(self.default)
        at = placed(req)
        if self.model is None:
            slo_metrics.DECISIONS.labels("unpredicted").inc()
            self.mix.add(len(req.prompt_ids), req.params.max_tokens, time.monotonic(), len(req.prompt_ids) - at.cached)
            return
        began = time.perf_counter()
        prediction = predict(self.model, self.candidates("prefill"), self.candidates("decode"),
                             len(req.prompt_ids), req.params.max_tokens, self.batch_tokens, self.mix.mix(),
                             self.mix.prompt_tokens_per_s(), waiting, at)
        self.errors.expire(time.monotonic())
        decision = decide(prediction, req.slo, self.policy, self.errors.margin)
        slo_metrics.DECISION_SECONDS.observe(time.perf_counter() - began)
        req.prediction, req.best_effort = prediction, decision.best_effort
        if not decision.admit:
            slo_metrics.DECISIONS.labels("refused").inc()
            raise SloUnmet(f"slo: {decision.reason}", decision.retry_after_s)
        slo_metrics.DECISIONS.labels("best_effort" if decision.best_effort else "admitted").inc()
        self.mix.add(len(req.prompt_ids), req.params.max_tokens, time.monotonic(), len(req.prompt_ids) - at.cached)

    def finished(self, req: RouterRequest, n_tokens: int) -> None:
        """Measured against predicted, for a request served to the end."""
        if req.prediction is None or req.slo is None:
            return
        life = req.lifetime
        ttft = life.first_token - life.arrival
        tpot = (life.finish - life.first_token) / (n_tokens - 1) if n_tokens > 1 else None
        slo_metrics.observe(req.prediction, ttft, tpot)
        p = req.prediction
        self.errors.add(time.monotonic(), None if p.ttft_s is None else ttft - p.ttft_s,
                        None if p.tpot_s is None or tpot is None else tpot - p.tpot_s)
        self.window.add(slo_metrics.outcome(req.prediction, req.slo, ttft, tpot))
