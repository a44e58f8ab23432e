"""Leases end once (released or expired), never under a pull in flight, and say why they are gone."""

import pytest

from services.kvxfer.leases import LeaseError, LeaseState, LeaseTable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(clock: Clock) -> LeaseTable:
    return LeaseTable(clock)


def test_expiry_ends_the_lease_once(table: LeaseTable, clock: Clock) -> None:
    lease = table.create("p0", [1, 2], 20, ttl_s=5)
    assert table.expire() == []
    clock.now += 5
    [end] = table.expire()
    assert (end.lease_id, end.block_ids, end.state) == (lease.lease_id, [1, 2], LeaseState.EXPIRED)
    assert table.expire() == [] and table.live() == 0


def test_pull_after_expiry_fails_clearly(table: LeaseTable, clock: Clock) -> None:
    lease = table.create("p0", [1], 10, ttl_s=5)
    clock.now += 6
    with pytest.raises(LeaseError, match="expired"):
        table.pin(lease.lease_id)
    table.expire()
    with pytest.raises(LeaseError, match="expired"):
        table.pin(lease.lease_id)


def test_pinned_lease_outlives_its_expiry_until_the_pull_ends(table: LeaseTable, clock: Clock) -> None:
    lease = table.create("p0", [1], 10, ttl_s=5)
    table.pin(lease.lease_id)
    clock.now += 10
    assert table.expire() == []
    with pytest.raises(LeaseError, match="expired"):
        table.pin(lease.lease_id)  # no new pull of an expired lease
    assert table.unpin(lease.lease_id, release=False) is None
    assert [e.state for e in table.expire()] == [LeaseState.EXPIRED]


def test_successful_pull_releases(table: LeaseTable) -> None:
    lease = table.create("p0", [4], 10, ttl_s=5)
    table.pin(lease.lease_id)
    end = table.unpin(lease.lease_id, release=True)
    assert end is not None and end.state is LeaseState.RELEASED
    with pytest.raises(LeaseError, match="released"):
        table.pin(lease.lease_id)


def test_a_lease_for_n_pulls_ends_after_the_nth_successful_one(table: LeaseTable) -> None:
    lease = table.create("p0", [4], 10, ttl_s=5, pulls=3)
    for _ in range(2):
        table.pin(lease.lease_id)
        table.pin(lease.lease_id)
        assert table.unpin(lease.lease_id, release=False) is None  # a failed pull does not count
        assert table.unpin(lease.lease_id, release=True) is None
    table.pin(lease.lease_id)
    end = table.unpin(lease.lease_id, release=True)
    assert end is not None and end.state is LeaseState.RELEASED


def test_pulls_that_share_one_pull_of_a_lease_end_it_only_together(table: LeaseTable) -> None:
    # a decode instance with pools at two kvxfers: each pulls its part, one after the other finishing first
    lease = table.create("p0", [4], 10, ttl_s=5, pulls=2)
    for _ in range(3):
        table.pin(lease.lease_id)
        assert table.unpin(lease.lease_id, release=True, share=2) is None
    table.pin(lease.lease_id)
    assert table.unpin(lease.lease_id, release=False, share=2) is None  # a failed part does not count
    table.pin(lease.lease_id)
    end = table.unpin(lease.lease_id, release=True, share=2)
    assert end is not None and end.state is LeaseState.RELEASED


def test_failed_pull_keeps_the_lease_for_a_retry(table: LeaseTable) -> None:
    lease = table.create("p0", [4], 10, ttl_s=5)
    table.pin(lease.lease_id)
    assert table.unpin(lease.lease_id, release=False) is None
    table.pin(lease.lease_id)


def test_release_during_a_pull_waits_for_it(table: LeaseTable) -> None:
    lease = table.create("p0", [4], 10, ttl_s=5)
    table.pin(lease.lease_id)
    assert table.release(lease.lease_id) is None
    with pytest.raises(LeaseError, match="released"):
        table.pin(lease.lease_id)
    end = table.unpin(lease.lease_id, release=False)
    assert end is not None and end.state is LeaseState.RELEASED


def test_unknown_and_dropped_leases(table: LeaseTable) -> None:
    with pytest.raises(LeaseError, match="unknown"):
        table.pin("nope")
    pulled = table.create("p0", [1], 1, ttl_s=5)
    table.create("p1", [1], 1, ttl_s=5)
    table.pin(pulled.lease_id)
    assert table.drop_instance("p0") == 1 and table.live() == 1
    assert table.unpin(pulled.lease_id, release=True) is None  # the pull ends after its pool left
