"""Protobuf messages to kvxfer's records and back (shared by the servicer and the client)."""

from __future__ import annotations

from distserve.v1 import kv_pb2, kvxfer_pb2
from services.common.pool_site import layout_from_pb
from services.kvxfer.leases import LeaseEnd, LeaseState
from services.kvxfer.records import SourceRef, Stats

REASONS = {LeaseState.RELEASED: kvxfer_pb2.LeaseEvent.RELEASED, LeaseState.EXPIRED: kvxfer_pb2.LeaseEvent.EXPIRED}


def source_from_pb(handle: kv_pb2.KVHandle) -> SourceRef:
    return SourceRef(handle.instance_id, handle.kvxfer_address, handle.lease_id, list(handle.block_ids),
                     layout_from_pb(handle.layout))


def lease_end_to_pb(end: LeaseEnd) -> kvxfer_pb2.LeaseEvent:
    return kvxfer_pb2.LeaseEvent(lease_id=end.lease_id, instance_id=end.instance_id, block_ids=end.block_ids,
                                 reason=REASONS[end.state])


def stats_to_pb(stats: Stats) -> kvxfer_pb2.StatsResponse:
    return kvxfer_pb2.StatsResponse(pools=stats.pools, live_leases=stats.live_leases,
                                    pulls_in_flight=stats.pulls_in_flight, pulls_ok=stats.pulls_ok,
                                    pulls_failed=stats.pulls_failed, bytes_pulled=stats.bytes_pulled,
                                    leases_expired=stats.leases_expired, leases_released=stats.leases_released)


def stats_from_pb(msg: kvxfer_pb2.StatsResponse) -> Stats:
    return Stats(msg.pools, msg.live_leases, msg.pulls_in_flight, msg.pulls_ok, msg.pulls_failed,
                 msg.bytes_pulled, msg.leases_expired, msg.leases_released)
