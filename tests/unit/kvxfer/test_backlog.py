"""Lease ends wait for a watcher up to a cap per instance; past it the oldest go, counted and logged once."""

import logging

import numpy as np
import pytest

from services.common.kv_layout import KVLayout
from services.kvxfer.backlog import LeaseBacklog
from services.kvxfer.core import KVXferCore
from services.kvxfer.leases import LeaseEnd, LeaseState
from services.kvxfer.metrics import XferMetrics
from services.kvxfer.pools import MappedPool

LAYOUT = KVLayout(num_blocks=16, num_layers=1, block_size=2, num_kv_heads=1, head_dim=4)


def _end(lease_id: str, instance_id: str = "p0") -> LeaseEnd:
    return LeaseEnd(lease_id, instance_id, [1], LeaseState.RELEASED)


def test_oldest_end_goes_past_the_cap_per_instance() -> None:
    backlog = LeaseBacklog(cap=2)
    assert backlog.add(_end("a")) is None and backlog.add(_end("b")) is None
    assert backlog.add(_end("x", "p1")) is None  # another instance has its own cap
    assert backlog.add(_end("c")).lease_id == "a"
    assert backlog.dropped == {"p0": 1}
    assert [e.lease_id for e in backlog.take("p0")] == ["b", "c"]
    assert backlog.take("p0") == [] and backlog.dropped == {}
    assert [e.lease_id for e in backlog.take("p1")] == ["x"]


def test_core_keeps_the_newest_ends_for_a_late_watcher(caplog: pytest.LogCaptureFixture) -> None:
    metrics = XferMetrics()
    core = KVXferCore("here:1", peers=None, puller=None, default_ttl_s=30, pull_timeout_s=30, metrics=metrics,
                      backlog=LeaseBacklog(cap=2))
    core.pools["p0"] = MappedPool("p0", LAYOUT, "cpu", np.zeros(LAYOUT.pool_bytes, np.uint8))
    leases = [core.create_lease("p0", [i], 2, 0)[0] for i in range(4)]
    with caplog.at_level(logging.WARNING):
        for lease in leases:
            core.release(lease.lease_id)
    assert [r.getMessage().startswith("nobody watches the leases of p0") for r in caplog.records] == [True]  # once
    assert metrics.registry.get_sample_value("distserve_kvxfer_lease_ends_dropped_total") == 2
    queue = core.watch("p0")
    assert [queue.get_nowait().lease_id for _ in range(queue.qsize())] == [lease.lease_id for lease in leases[2:]]
