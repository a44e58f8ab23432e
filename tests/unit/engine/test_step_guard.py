"""A step that fails for one request fails that request alone; the engine serves on."""

from __future__ import annotations

import pytest

from services.common.sampling import FinishReason, SamplingParams
from services.engine.step_guard import EngineBroken


def _poison(engine, bad_ids: set[str]) -> None:
    """Fault injection: the forward pass raises whenever a batch holds one of `bad_ids`."""
    execute = engine.runner.execute

    def failing(batch):
        if any(it.seq.request_id in bad_ids for it in batch.items):
            raise RuntimeError("probability tensor contains nan")
        return execute(batch)

    engine.runner.execute = failing


def _run(engine) -> dict[str, list]:
    outs: dict[str, list] = {}
    while engine.has_work():
        for out in engine.step():
            outs.setdefault(out.request_id, []).append(out)
    return outs


def test_the_failing_request_ends_alone_and_the_others_match_their_run_alone(make_engine) -> None:
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    expected = make_engine(num_blocks=32).generate([[1, 50, 51], [1, 60, 61, 62]], params)
    engine = make_engine(num_blocks=32)
    _poison(engine, {"bad"})
    engine.add_request("a", [1, 50, 51], SamplingParams(max_tokens=6, ignore_eos=True))
    engine.add_request("bad", [1, 7, 8, 9], SamplingParams(max_tokens=6, ignore_eos=True))
    engine.add_request("b", [1, 60, 61, 62], SamplingParams(max_tokens=6, ignore_eos=True))
    outs = _run(engine)
    assert [t for o in outs["a"] for t in o.new_token_ids] == expected[0]
    assert [t for o in outs["b"] for t in o.new_token_ids] == expected[1]
    (failed,) = outs["bad"]
    assert failed.error and failed.finish_reason is FinishReason.ABORT and not failed.new_token_ids
    assert engine.blocks.num_used == 0
    engine.add_request("bad", [1, 7, 8, 9], SamplingParams(max_tokens=2))  # its id is free again
    assert _run(engine)["bad"][0].error


def test_steps_that_fail_for_every_request_mean_the_engine_is_broken(make_engine) -> None:
    engine = make_engine(num_blocks=32)
    _poison(engine, {"a", "b"})
    engine.add_request("a", [1, 50, 51], SamplingParams(max_tokens=4))
    engine.add_request("b", [1, 52, 53], SamplingParams(max_tokens=4))
    with pytest.raises(EngineBroken):
        engine.step()


def test_consecutive_single_request_failures_up_to_the_bound_leave_the_engine_serving(make_engine) -> None:
    engine = make_engine(num_blocks=32)
    _poison(engine, {f"bad{i}" for i in range(engine.guard.max_failing_steps)})
    for i in range(engine.guard.max_failing_steps - 1):
        engine.add_request(f"bad{i}", [1, 50 + i], SamplingParams(max_tokens=4))
        assert _run(engine)[f"bad{i}"][0].error
    engine.add_request("ok", [1, 50, 51], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len([t for o in _run(engine)["ok"] for t in o.new_token_ids]) == 3
