"""Planner service settings (environment prefix DISTSERVE_PLANNER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PlannerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTSERVE_PLANNER_", frozen=True)

    host: str = Field("127.0.0.1", description="address the REST API binds")
    port: int = Field(8001, ge=0, le=65535, description="port of the REST API (0: any free port)")
    redis_url: str | None = Field(None, description="Redis with request records and the plan; none: no replanning")
    workers: int | None = Field(None, ge=1, description="processes for the search; none: one per CPU core")
    replan_interval: float = Field(0.0, ge=0, description="seconds between workload checks; 0 disables the loop")
    replan_threshold: float = Field(0.25, gt=0, description="relative workload change that triggers a replan")
    replan_model: str = Field("opt-13b", description="model the replanning loop plans for")
    replan_hardware: str = Field("a100-80gb", description="coefficient set or profile file the loop plans with")
    admin_key_file: str = Field("", description="file of hashed admin keys (`distserve api-key add`); POSTs need one")
    allow_unauthenticated: bool = Field(False, description="serve beyond loopback without admin keys")
    max_body_bytes: int = Field(1 << 20, description="largest request body accepted (413 above)")
    fit_interval: float = Field(5.0, ge=0, description="seconds between refits of the online latency model; 0: none")
    fit_window_s: float = Field(300.0, gt=0, description="age of the oldest served step the online model is fitted to")
    fit_max_steps: int = Field(5000, ge=10, description="steps per instance kind and device the window holds at most")
    model_profile: str | None = Field(None, description="`distserve profile` file seeding the online fit's attention "
                                                        "terms; none: every term is fitted")
