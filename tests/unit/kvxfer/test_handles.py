"""The leases a KV handle holds: its own, and one per other host of its source instance's ranks (the router ends
them all for a prefilled request nobody will decode)."""

from __future__ import annotations

from distserve.v1 import kv_pb2
from services.kvxfer.api import handle_leases, site_handles


def test_every_site_lease_of_a_handle_once() -> None:
    handle = kv_pb2.KVHandle(instance_id="p", kvxfer_address="a:1", lease_id="L0", shards=[
        kv_pb2.KVShard(pool_id="p", rank=0), kv_pb2.KVShard(pool_id="p.r1", rank=1),
        kv_pb2.KVShard(pool_id="p.r2", rank=2, kvxfer_address="b:1", lease_id="L1", lease_instance_id="p.r2"),
        kv_pb2.KVShard(pool_id="p.r3", rank=3, kvxfer_address="b:1", lease_id="L1", lease_instance_id="p.r2")])
    assert handle_leases(handle) == [("a:1", "L0"), ("b:1", "L1")]
    assert handle_leases(kv_pb2.KVHandle(kvxfer_address="a:1", lease_id="L0")) == [("a:1", "L0")]


def test_a_pull_reads_each_sites_pools_under_that_sites_lease() -> None:
    handle = kv_pb2.KVHandle(instance_id="p", kvxfer_address="a:1", lease_id="L0", block_ids=[3, 4], num_tokens=20,
                             shards=[kv_pb2.KVShard(pool_id="p", rank=0),
                                     kv_pb2.KVShard(pool_id="p.r1", rank=1, kvxfer_address="b:1", lease_id="L1",
                                                    lease_instance_id="p.r1")])
    sites = site_handles(handle)
    assert sites[""] is handle and list(sites) == ["", "b:1"]
    assert (sites["b:1"].instance_id, sites["b:1"].lease_id, list(sites["b:1"].block_ids)) == ("p.r1", "L1", [3, 4])
