"""Prometheus metrics shared by the services; each process serves them over HTTP."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)

TTFT = Histogram("distserve_ttft_seconds", "time to first token", buckets=LATENCY_BUCKETS)
TPOT = Histogram("distserve_tpot_seconds", "time per output token after the first", buckets=LATENCY_BUCKETS)
E2E = Histogram("distserve_e2e_seconds", "end-to-end request latency", buckets=LATENCY_BUCKETS)
STAGE = Histogram("distserve_stage_seconds", "per-stage latency", ["stage"], buckets=LATENCY_BUCKETS)
REQUESTS = Counter("distserve_requests_total", "requests by outcome", ["outcome"])
QUEUE = Gauge("distserve_queue_length", "requests waiting in the engine", ["instance"])
RUNNING = Gauge("distserve_running", "requests running in the engine", ["instance"])
KV_USED = Gauge("distserve_kv_blocks_used", "KV blocks in use (held or reserved included)", ["instance"])
KV_RESERVED = Gauge("distserve_kv_blocks_reserved", "KV blocks reserved for pulls not yet admitted", ["instance"])
KV_HELD = Gauge("distserve_kv_blocks_held", "KV blocks of prefilled requests waiting to be pulled", ["instance"])
KV_TOTAL = Gauge("distserve_kv_blocks_total", "KV blocks in the pool", ["instance"])


def serve_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Starts the /metrics HTTP server unless port is 0."""
    if port:
        start_http_server(port, addr=host)
