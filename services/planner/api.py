"""The planner's REST API (FastAPI; OpenAPI at /docs): plan, simulate, replan, current plan, recorded workload."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import asdict

import redis
from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from services.common.api_keys import ApiKeys
from services.common.front_door import BodyLimit
from services.common.redis_auth import client as redis_client
from services.common.registry import load_plan, read_records, save_plan
from services.planner.actuation import Actuator
from services.planner.config import PlannerSettings
from services.planner.online_fit import OnlineFit
from services.planner.records import fit_records
from services.planner.replan import Replanner
from services.planner.schemas import PlanRequest, ReplanRequest, SimulateRequest
from services.planner.service import online_fit_of, run_plan, run_simulate

log = logging.getLogger(__name__)

def create_app(settings: PlannerSettings, client: redis.Redis | None = None,
               actuator: Actuator | None = None) -> FastAPI:
    """The app; `client` (or settings.redis_url) gives request records, plan storage and the replanning loop;
    `actuator` (e.g. `distserve up`'s launcher) applies what the loop and `/v1/replan` plan."""
    if client is None and settings.redis_url:
        client = redis_client(redis.Redis, settings.redis_url)
    state: dict = {"plan": None}
    registry = CollectorRegistry()
    plans = Counter("distserve_planner_plans", "Plans made", ["source"], registry=registry)
    search = Histogram("distserve_planner_search_seconds", "Duration of a placement search", registry=registry,
                       buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120))
    per_gpu = Gauge("distserve_planner_goodput_per_gpu", "Predicted goodput per GPU of the current plan",
                    registry=registry)

    def adopt(plan: dict, source: str) -> None:
        state["plan"] = plan
        plans.labels(source).inc()
        search.observe(plan["search_seconds"])
        per_gpu.set(plan["goodput_per_gpu"])

    base = ReplanRequest(model=settings.replan_model, hardware=settings.replan_hardware)
    replanner = Replanner(client, base, actuator, threshold=settings.replan_threshold, workers=settings.workers,
                          on_plan=lambda plan: adopt(plan, "replan")) if client is not None else None

    online: OnlineFit | None = online_fit_of(settings) if settings.redis_url else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        stop = asyncio.Event()
        tasks = []
        if replanner is not None and settings.replan_interval > 0:
            tasks.append(asyncio.create_task(replanner.run(settings.replan_interval, stop)))
        if online is not None and settings.fit_interval > 0:
            tasks.append(asyncio.create_task(online.run(settings.fit_interval, stop)))
        yield
        stop.set()
        await asyncio.gather(*tasks)
        if online is not None:
            await online.registry.close()

    app = FastAPI(title="distserve planner", version="1", lifespan=lifespan,
                  description="Goodput-optimal placement of prefill and decode instances (DistServe, OSDI'24).")
    app.state.replanner = replanner
    app.state.online_fit = online
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    admin = ApiKeys(settings.admin_key_file)

    @app.middleware("http")
    async def check_admin_key(request: Request, call_next):
        """Planning runs worker processes and rescales the stack: only operators with an admin key may POST."""
        if request.method != "GET" and not admin.allows_bearer(request.headers.get("authorization")):
            return JSONResponse(status_code=401, content={"detail": "missing or wrong admin key"})
        return await call_next(request)

    @app.exception_handler(redis.exceptions.ConnectionError)
    @app.exception_handler(redis.exceptions.TimeoutError)
    async def redis_away(request: Request, exc: redis.exceptions.RedisError) -> JSONResponse:
        """Redis away is capacity missing for a while (it is restarted), not a fault of the planner's."""
        log.warning("redis unreachable: %s", exc)
        return JSONResponse(status_code=503, content={"detail": "redis: unreachable now; retry"},
                            headers={"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    def need_redis() -> redis.Redis:
        if client is None:
            raise HTTPException(400, "redis: the planner was started without --redis-url; no request records")
        return client

    def remember(plan: dict, req: PlanRequest) -> None:
        """The current plan, stored; the replanning loop keeps planning with this request's parameters."""
        adopt(plan, "plan")
        if client is not None:
            try:
                save_plan(client, plan)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:  # still answered
                log.warning("could not store the plan: %s", exc)
        if replanner is not None:
            replanner.request = ReplanRequest(**req.model_dump(exclude={"workload", "rate"}))

    @app.post("/v1/plan", summary="Find the goodput-optimal placement")
    async def plan(req: PlanRequest) -> dict:
        result, _, _ = await run_in_threadpool(run_plan, req, settings.workers)
        remember(result, req)
        return result

    @app.post("/v1/simulate", summary="Attainment and TTFT/TPOT of a given placement at a rate")
    async def simulate(req: SimulateRequest) -> dict:
        return await run_in_threadpool(run_simulate, req)

    @app.post("/v1/replan", summary="Plan for the workload recorded in Redis (and apply it, with an actuator)")
    async def replan(req: ReplanRequest) -> dict:
        rds = need_redis()
        records = await run_in_threadpool(read_records, rds, req.max_records)
        recorded = fit_records(records)
        replanner.request = req
        plan, result = await run_in_threadpool(replanner.replan, recorded)
        actuation = await run_in_threadpool(replanner.apply, result)
        return plan if actuation is None else {**plan, "actuation": asdict(actuation)}

    @app.get("/v1/plan", summary="The current plan")
    async def current_plan() -> dict:
        stored = state["plan"] or (load_plan(client) if client is not None else None)
        if stored is None:
            raise HTTPException(404, "plan: none made yet; POST /v1/plan or /v1/replan")
        return stored

    @app.get("/v1/model", summary="The latency model fitted online to the steps the instances served")
    async def model() -> dict:
        if online is None:
            raise HTTPException(400, "redis: the planner was started without --redis-url; no instances to fit to")
        if online.model is None:
            raise HTTPException(404, "model: not fitted yet; it is refitted every fit_interval seconds")
        return online.model

    @app.get("/v1/workload", summary="Statistics of the recorded workload")
    async def workload(max_records: int = 2000) -> dict:
        rds = need_redis()
        return fit_records(await run_in_threadpool(read_records, rds, max_records)).as_dict()

    @app.get("/healthz", summary="Liveness")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
