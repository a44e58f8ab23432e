"""The engine thread: commands run between steps, outputs reach the callback, errors reach the caller."""

from __future__ import annotations

import threading

import pytest

from services.common.errors import EngineInputError
from services.common.sampling import SamplingParams
from services.engine.engine import StepOutput
from services.engine.engine_thread import EngineThread


def test_the_engine_thread_streams_tokens_and_reports_bad_input(make_engine) -> None:
    engine = make_engine(num_blocks=32)
    expected = engine.generate([[1, 50, 51]], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    tokens: list[int] = []
    finished = threading.Event()

    def on_outputs(outputs: list[StepOutput]) -> None:
        for out in outputs:
            tokens.extend(out.new_token_ids)
            if out.finished:
                finished.set()

    thread = EngineThread(engine, on_outputs)
    thread.start()
    try:
        bad = thread.call(lambda e: e.add_request("bad", [], SamplingParams()))
        with pytest.raises(EngineInputError):
            bad.result(timeout=10)
        thread.call(lambda e: e.add_request("r", [1, 50, 51], SamplingParams(max_tokens=6, ignore_eos=True))).result(timeout=10)
        assert finished.wait(timeout=30)
        assert tokens == expected
        assert thread.call(lambda e: e.blocks.num_used).result(timeout=10) == 0
    finally:
        thread.stop()


def test_a_failing_step_stops_the_engine_thread_and_fails_every_command(make_engine) -> None:
    from services.engine.engine_thread import EngineFailed

    engine = make_engine(num_blocks=32)

    def broken_execute(batch):
        raise RuntimeError("device lost")

    engine.runner.execute = broken_execute  # fault injection: the device fails mid-step
    errors: list[BaseException] = []
    failed = threading.Event()
    thread = EngineThread(engine, lambda outputs: None, lambda exc: (errors.append(exc), failed.set()))
    thread.start()
    try:
        def admit_two(e) -> None:  # one batch, which fails for each request alone too: the engine is at fault
            e.add_request("r", [1, 50, 51], SamplingParams(max_tokens=4))
            e.add_request("s", [1, 52, 53], SamplingParams(max_tokens=4))

        thread.call(admit_two).result(timeout=10)
        assert failed.wait(timeout=10)
        assert "device lost" in repr(errors[0].__cause__)
        with pytest.raises(EngineFailed):
            thread.call(lambda e: e.blocks.num_used).result(timeout=10)
    finally:
        thread.stop()


def test_a_command_cancelled_before_it_runs_still_runs_and_the_thread_serves_on(make_engine) -> None:
    """asyncio cancels a command's future when its awaiting task is cancelled (a client gone mid-admission)."""
    engine = make_engine(num_blocks=32)
    thread = EngineThread(engine, lambda outputs: None)
    gate = threading.Event()
    try:
        thread.start()
        thread.call(lambda e: gate.wait(10))  # holds the thread while the next command is cancelled
        blocks = thread.call(lambda e: e.reserve_blocks(20))
        assert blocks.cancel()
        gate.set()
        assert thread.call(lambda e: e.blocks.num_used).result(timeout=10) == 2  # it ran: its caller frees on cancel
        assert thread.error is None
    finally:
        thread.stop()
