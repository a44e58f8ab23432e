"""Records kvxfer's core hands out: what a pull needs of a handle, a pull's result, the counters."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.kv_layout import KVLayout


@dataclass(frozen=True, slots=True)
class SourceRef:
    """The fields of a KVHandle a pull needs."""

    instance_id: str
    kvxfer_address: str
    lease_id: str
    block_ids: list[int]
    layout: KVLayout


@dataclass(frozen=True, slots=True)
class PullResult:
    nbytes: int
    seconds: float
    path: str  # "same-host" | "cross-host"
    crc: int | None


@dataclass(frozen=True, slots=True)
class Stats:
    pools: int
    live_leases: int
    pulls_in_flight: int
    pulls_ok: int
    pulls_failed: int
    bytes_pulled: int
    leases_expired: int
    leases_released: int
