"""A decode instance lets a local prefill into at most one step in 1 / share while others decode."""

from services.decode.local_pacer import LocalPacer


def test_local_prefills_take_at_most_their_share_of_a_busy_instances_steps() -> None:
    pacer = LocalPacer(share=0.25)
    assert pacer.take(steps=100, busy=True)
    assert not pacer.take(steps=101, busy=True) and not pacer.take(steps=103, busy=True)
    assert pacer.take(steps=104, busy=True)  # 4 steps on: one in four


def test_an_idle_instance_takes_each_and_a_share_of_zero_none() -> None:
    pacer = LocalPacer(share=0.25)
    assert pacer.take(steps=7, busy=False) and pacer.take(steps=7, busy=False)
    assert not LocalPacer(share=0.0).take(steps=0, busy=False)
