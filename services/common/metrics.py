"""Prometheus metrics shared by the services; each process serves them over HTTP."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)

TTFT = Histogram("distserve_ttft_seconds", "time to first token", buckets=LATENCY_BUCKETS)
TPOT = Histogram("distserve_tpot_seconds", "time per output token after the first", buckets=LATENCY_BUCKETS)
E2E = Histogram("distserve_e2e_seconds", "end-to-end request latency", buckets=LATENCY_BUCKETS)
STAGE = Histogram("distserve_stage_seconds", "per-stage latency", ["stage"], buckets=LATENCY_BUCKETS)
ROUTING = Histogram("distserve_router_routing_seconds", "from a request's arrival to its first instance call "
                    "(prefill, or a local prefill's decode): routing, admission and booking",
                    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
                             0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5))
REQUESTS = Counter("distserve_requests_total", "requests by outcome", ["outcome"])
QUEUE = Gauge("distserve_queue_length", "requests waiting in the engine", ["instance"])
RUNNING = Gauge("distserve_running", "requests running in the engine", ["instance"])
KV_USED = Gauge("distserve_kv_blocks_used", "KV blocks in use (held or reserved included)", ["instance"])
KV_RESERVED = Gauge("distserve_kv_blocks_reserved", "KV blocks reserved for pulls not yet admitted", ["instance"])
KV_HELD = Gauge("distserve_kv_blocks_held", "KV blocks of prefilled requests waiting to be pulled", ["instance"])
KV_TOTAL = Gauge("distserve_kv_blocks_total", "KV blocks in the pool", ["instance"])
KV_CACHED = Gauge("distserve_kv_blocks_cached", "cached KV blocks no request holds (evicted on demand)", ["instance"])
PREFIX_CACHE_QUERIES = Counter("distserve_prefix_cache_queries", "prompt tokens looked up in the prefix cache",
                               ["instance"])
PREFIX_CACHE_HITS = Counter("distserve_prefix_cache_hits", "prompt tokens found in the prefix cache", ["instance"])
COMPUTED_TOKENS = Counter("distserve_computed_tokens", "tokens whose K/V the engine computed", ["instance"])


_totals: dict[int, float] = {}  # a labelled counter (by id: prometheus keeps each one for the process) → its total


def advance_counter(counter: Counter, total: float) -> None:
    """Brings a labelled counter up to a total kept elsewhere (an engine's own count, read at each heartbeat)."""
    delta = total - _totals.get(id(counter), 0.0)
    if delta > 0:
        counter.inc(delta)
        _totals[id(counter)] = total


def serve_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Starts the /metrics HTTP server unless port is 0."""
    if port:
        start_http_server(port, addr=host)
