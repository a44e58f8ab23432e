"""Configuration of an engine instance: flags of `distserve prefill|decode|colocated|chunked`, or DISTSERVE_*
environment variables. Kept apart from the instance itself so the CLI parses without importing torch."""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common import defaults
from services.common.engine_settings import EngineSettingsFields

Role = Literal["prefill", "decode", "colocated", "chunked"]


class InstanceSettings(EngineSettingsFields):
    model_config = SettingsConfigDict(env_prefix="DISTSERVE_", frozen=True)

    role: Role = Field(description="which engine policy this instance runs")
    model: str = Field(description="model folder")
    device: str = Field("cpu", description="cpu, cpu:N (pinned to core N), cpu:a-b or cpu:a,b (those cores, a thread on "
                        "each) or cuda:N")
    tp: int = Field(1, description="tensor-parallel ranks per pipeline stage (one process and device each)")
    pp: int = Field(1, description="pipeline stages")
    ep: int = Field(0, description="MoE: expert groups per stage, dividing --tp; each holds its share of the "
                                   "experts, split over its tp / ep ranks (0: one group per TP rank)")
    devices: str = Field("", description="comma-separated device per rank when tp x pp > 1 (default: consecutive "
                                         "from --device)")
    rendezvous: str = Field("", description="host:port where rank 0 waits for ranks 1..N-1 started on their own "
                                            "(`distserve rank`); empty: the instance starts its ranks itself")
    host: str = Field("127.0.0.1", description="address to bind the gRPC server to")
    port: int = Field(0, description="gRPC port")
    instance_id: str = Field("", description="unique id; made from the role when empty")
    node: str = Field(default_factory=socket.gethostname, description="host name; instances of one node share a kvxfer")
    redis_url: str = Field(description="Redis holding the registry and load book")
    kvxfer: str = Field("", description="gRPC address of this host's kvxfer (prefill and decode)")
    max_pending: int = Field(256, description="most requests queued or running before RESOURCE_EXHAUSTED")
    lease_ttl_s: float = Field(defaults.LEASE_TTL_S, description="how long prefilled K/V waits for a pull")
    pull_timeout_s: float = Field(defaults.PULL_TIMEOUT_S, description="bound on one K/V pull")
    local_prefill_share: float = Field(
        0.1, ge=0, le=1, description="decode: the most of its steps that may carry a prompt it prefills itself (the "
                                     "router's local path) while other sequences decode; past it the router's "
                                     "request goes by a prefill instance (0: never prefill locally)")
    heartbeat_s: float = Field(1.0, description="registry heartbeat period (the TTL is 3 periods)")
    drain_grace_s: float = Field(defaults.DRAIN_GRACE_S, description="on SIGTERM: seconds in-flight requests get to finish")
    metrics_port: int = Field(0, description="Prometheus HTTP port; 0 = off")
    step_journal: bool = Field(False, description="write each step's request ids to a journal that the supervisor "
                                                  "reads after a crash (`distserve up` sets it)")
