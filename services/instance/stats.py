"""An instance's engine snapshot as its Stats reply and as its Prometheus gauges."""

from __future__ import annotations

from distserve.v1 import worker_pb2
from services.common.metrics import (
    COMPUTED_TOKENS,
    KV_CACHED,
    KV_HELD,
    KV_RESERVED,
    KV_USED,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    QUEUE,
    RUNNING,
    advance_counter,
)
from services.engine.step_log import EngineStats


def stats_reply(stats: EngineStats, instance_id: str, role: str) -> worker_pb2.InstanceStatsResponse:
    return worker_pb2.InstanceStatsResponse(
        instance_id=instance_id, role=role, blocks_total=stats.blocks_total, blocks_used=stats.blocks_used,
        waiting=stats.waiting, running=stats.running, held=stats.held, steps=stats.steps,
        step_log=[worker_pb2.StepStat(kind=r.kind, seqs=r.seqs, tokens=r.tokens, sum_sq=r.sum_sq, context=r.context,
                                      start=r.start, seconds=r.seconds) for r in stats.step_log],
        blocks_cached=stats.blocks_cached, computed_tokens=stats.computed_tokens,
        prefix_cache_queried=stats.cache_queried, prefix_cache_hit=stats.cache_hit)


def export_gauges(stats: EngineStats, instance_id: str) -> None:
    QUEUE.labels(instance_id).set(stats.waiting)
    RUNNING.labels(instance_id).set(stats.running)
    KV_USED.labels(instance_id).set(stats.blocks_used)
    KV_RESERVED.labels(instance_id).set(stats.blocks_reserved)
    KV_HELD.labels(instance_id).set(stats.blocks_held)
    KV_CACHED.labels(instance_id).set(stats.blocks_cached)
    advance_counter(PREFIX_CACHE_QUERIES.labels(instance_id), stats.cache_queried)
    advance_counter(PREFIX_CACHE_HITS.labels(instance_id), stats.cache_hit)
    advance_counter(COMPUTED_TOKENS.labels(instance_id), stats.computed_tokens)
