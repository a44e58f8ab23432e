"""kvxfer's counters: plain numbers for the Stats RPC and the same figures as Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
GBPS_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class XferMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.pulls_ok = self.pulls_failed = self.bytes_pulled = self.leases_expired = self.leases_released = 0
        self._bytes = Counter("distserve_kvxfer_pulled_bytes", "Bytes pulled", ["path"], registry=r)
        self._latency = Histogram("distserve_kvxfer_pull_seconds", "Pull latency inside kvxfer", ["path"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self._gbps = Histogram("distserve_kvxfer_pull_gbps", "Throughput of each pull, GB/s", ["path"],
                               buckets=GBPS_BUCKETS, registry=r)
        self._failed = Counter("distserve_kvxfer_pulls_failed", "Failed pulls", ["reason"], registry=r)
        self._expired = Counter("distserve_kvxfer_leases_expired", "Leases that expired unpulled", registry=r)
        self._ends_dropped = Counter("distserve_kvxfer_lease_ends_dropped", "Lease ends dropped from a full "
                                     "backlog (nobody watching the instance)", registry=r)
        self._live = Gauge("distserve_kvxfer_live_leases", "Leases held now", registry=r)

    def pull_ok(self, path: str, nbytes: int, seconds: float) -> None:
        self.pulls_ok += 1
        self.bytes_pulled += nbytes
        self._bytes.labels(path).inc(nbytes)
        self._latency.labels(path).observe(seconds)
        self._gbps.labels(path).observe(nbytes / max(seconds, 1e-9) / 1e9)

    def pull_failed(self, reason: str) -> None:
        self.pulls_failed += 1
        self._failed.labels(reason).inc()

    def lease_ended(self, expired: bool) -> None:
        if expired:
            self.leases_expired += 1
            self._expired.inc()
        else:
            self.leases_released += 1

    def lease_end_dropped(self) -> None:
        self._ends_dropped.inc()

    def live_leases(self, n: int) -> None:
        self._live.set(n)
