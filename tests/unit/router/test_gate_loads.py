"""The loads the gate predicts with: the book's at the last read, this router's bookings since, at least its own."""

import pytest

from services.common.registry import InstanceInfo, Registry
from services.common.slo import SLO
from services.router.dispatch import Dispatcher
from services.router.gate import SloGate, booked_load


def test_the_book_and_this_routers_bookings_since_its_read():
    assert booked_load(book=3000, local=1200, local_at_read=1000) == 3200  # another router's 2000, ours 1200
    assert booked_load(book=0, local=0, local_at_read=0) == 0


def test_a_book_that_lost_the_instances_entry_still_counts_this_routers_own_queue():
    # 4400 tokens of this router's in flight; the entry was dropped and came back at 0, then went below zero as
    # the old requests ended: the queue is still this router's own 3000
    assert booked_load(book=0, local=4400, local_at_read=4400) == 4400
    assert booked_load(book=-1400, local=3000, local_at_read=3000) == 3000


def test_the_gates_candidates_take_the_booked_load_of_each_live_instance():
    dispatcher = Dispatcher(Registry.from_url("redis://127.0.0.1:9"))  # no call is made
    dispatcher.instances = {"p0": InstanceInfo("p0", "prefill", "a:1", "h", "cpu:0"),
                            "d0": InstanceInfo("d0", "decode", "a:2", "h", "cpu:1")}
    dispatcher.local_load.update({"p0": 4400.0})
    gate = SloGate(dispatcher.registry, dispatcher, "refuse", SLO(), 512)
    gate.loads, gate.local_at_read = {"d0": 700.0}, {"p0": 4400.0}  # p0's entry missing from the book
    (p0,) = gate._candidates("prefill")
    (d0,) = gate._candidates("decode")
    assert (p0.id, p0.kind, p0.load) == ("p0", "prefill@cpu:0", pytest.approx(4400))
    assert (d0.kind, d0.load) == ("decode@cpu:1", pytest.approx(700))
