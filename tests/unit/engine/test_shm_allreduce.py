"""The TP all-reduce through shared memory: every rank gets the same sum, in pieces and op after op; a rank that
never arrives fails the others in bounded time, one that is gone at once; a group where one rank cannot map the
segment keeps gloo."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from services.engine.parallel import shm_allreduce
from services.engine.parallel.shm_allreduce import SLOT_FLOATS, join_segment

pytestmark = pytest.mark.skipif(shm_allreduce._kernel() is None, reason="no C compiler: the path is not used")


def _in_threads(size: int, body) -> list:
    """body(rank, store) in one thread per rank (ctypes releases the GIL in the kernel), results in rank order."""
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=20))
    results: list = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = body(rank, store)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.mark.parametrize("size", [2, 3])
def test_every_rank_gets_the_same_sum_op_after_op(size: int) -> None:
    shapes = [(1, 512), (8, 512), (SLOT_FLOATS + 100,), (0, 512), (3, 7)]  # one of them goes in two pieces
    parts = {(r, i): torch.randn(shape, generator=torch.Generator().manual_seed(10 * r + i))
             for r in range(size) for i, shape in enumerate(shapes)}

    def body(rank: int, store: dist.Store) -> list[torch.Tensor]:
        group = join_segment(store, "tp0/", rank, size)
        assert group is not None
        return [group.all_reduce(parts[rank, i].clone()) for i in range(len(shapes)) for _ in range(3)]

    results = _in_threads(size, body)
    for i in range(len(shapes)):
        want = parts[0, i].clone()
        for r in range(1, size):
            want += parts[r, i]
        for rank in range(size):
            for k in range(3):
                assert torch.equal(results[rank][3 * i + k], want), (rank, i)


def test_a_rank_that_never_arrives_fails_the_others_in_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm_allreduce, "TIMEOUT_S", 0.3)

    def body(rank: int, store: dist.Store) -> object:
        group = join_segment(store, "tp0/", rank, 2)
        return group.all_reduce(torch.ones(4)) if rank == 0 else "left"

    results = _in_threads(2, body)
    assert isinstance(results[0], RuntimeError) and "rank 1" in str(results[0])


def test_a_rank_that_is_gone_fails_the_others_at_once() -> None:
    def body(rank: int, store: dist.Store) -> object:
        group = join_segment(store, "tp0/", rank, 2)
        if rank == 1:
            group.close()  # as its death does: the kernel drops its lock
            return "gone"
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="rank 1 of the group is gone"):
            while True:  # until rank 1 has closed
                group.all_reduce(torch.ones(4))
        return time.monotonic() - started

    waited = _in_threads(2, body)[0]
    assert isinstance(waited, float) and waited < shm_allreduce.TIMEOUT_S / 10


def test_a_rank_that_cannot_map_the_segment_keeps_the_group_on_gloo(tmp_path) -> None:
    store = dist.HashStore()
    store.set("tp0/shm-allreduce/path", str(tmp_path / "on-another-host"))
    store.set("tp0/shm-allreduce/ok0", "1")
    assert join_segment(store, "tp0/", 1, 2) is None
    assert store.get("tp0/shm-allreduce/ok1") == b"0"


def test_the_segment_file_is_gone_once_the_group_has_joined() -> None:
    def body(rank: int, store: dist.Store) -> str:
        join_segment(store, "tp0/", rank, 2)
        return store.get("tp0/shm-allreduce/path").decode()

    paths = _in_threads(2, body)
    assert paths[0] == paths[1] and not os.path.exists(paths[0])
