"""Each served step is logged with its batch shape and its period in service, for the bench's served fit."""

from __future__ import annotations

import itertools
import threading
import time

from services.common.sampling import SamplingParams
from services.common.step_model.attended import Attended
from services.engine.engine_thread import EngineThread
from services.engine.scheduler import ScheduledSeq, SchedulerOutput
from services.engine.sequence import Sequence
from services.engine.step_log import StepLog, StepRecord


def _seq(prompt: int, computed: int, outputs: int = 0) -> Sequence:
    seq = Sequence(f"s{prompt}-{computed}", [1] * prompt, SamplingParams())
    seq.output_ids = [2] * outputs
    seq.num_computed = computed
    return seq


def test_record_shape_of_prefill_decode_and_mixed_batches() -> None:
    prefill = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(10, 0), 10), ScheduledSeq(_seq(6, 0), 6)]), 5.0, 0.1)
    assert (prefill.kind, prefill.seqs, prefill.tokens, prefill.sum_sq, prefill.context) == ("prefill", 2, 16, 136, 16)
    decode = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(10, 10, 1), 1), ScheduledSeq(_seq(6, 7, 2), 1)]), 5.0, 0.1)
    assert (decode.kind, decode.seqs, decode.tokens, decode.context) == ("decode", 2, 2, 19)
    mixed = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(10, 10, 1), 1), ScheduledSeq(_seq(8, 0), 8)]), 5.0, 0.1)
    assert mixed.kind == "mixed"


def test_a_suffix_after_a_prefix_hit_counts_its_attention_over_the_prefix() -> None:
    # 8 tokens computed after 32 cached: t2 = 40² − 32² (the planner's simulator charges the same, prompt_sq)
    hit = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(40, 32), 8), ScheduledSeq(_seq(6, 0), 6)]), 5.0, 0.1)
    assert (hit.kind, hit.tokens, hit.sum_sq, hit.context) == ("prefill", 14, 40 ** 2 - 32 ** 2 + 36, 46)


def test_a_sliding_model_logs_its_attention_in_the_latency_models_units() -> None:
    # half the layers attend to their last 16 positions: a 100-token decode counts 50 + 8, a 40-token prompt
    # half its square and half the windowed one (16² + 2·16·24), as the planner's terms (`Attended`) do
    half = Attended.of(4, 2, 16)
    decode = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(99, 99, 1), 1)]), 5.0, 0.1, half)
    assert decode.context == 58
    prompt = StepRecord.of(SchedulerOutput([ScheduledSeq(_seq(40, 0), 40)]), 5.0, 0.1, half)
    assert (prompt.sum_sq, prompt.context) == ((40 ** 2 + 16 ** 2 + 2 * 16 * 24) // 2, 28)


def test_log_keeps_the_newest_and_filters_by_start() -> None:
    log = StepLog(maxlen=3)
    for start in range(5):
        log.add(StepRecord("decode", 1, 1, 1, 10, float(start), 0.01))
    assert [r.start for r in log.since(0.0)] == [2.0, 3.0, 4.0]
    assert [r.start for r in log.since(3.5)] == [4.0]


def test_worker_logs_every_step_with_a_period_covering_its_forward_pass(make_engine) -> None:
    engine = make_engine(num_blocks=32)
    forward: list[float] = []
    run = engine.runner.execute

    def timed(batch):
        began = time.perf_counter()
        out = run(batch)
        forward.append(time.perf_counter() - began)
        return out

    engine.runner.execute = timed
    done = threading.Event()
    thread = EngineThread(engine, lambda outs: done.set() if any(o.finished for o in outs) else None)
    thread.start()
    try:
        thread.call(lambda e: e.add_request("r", [1, 50, 51], SamplingParams(max_tokens=5, ignore_eos=True))).result(timeout=10)
        assert done.wait(timeout=30)
        records = thread.call(lambda e: e.step_log.since(1.0)).result(timeout=10)
    finally:
        thread.stop()
    assert [r.kind for r in records] == ["prefill"] + ["decode"] * 4
    assert [r.context for r in records] == [3, 4, 5, 6, 7]
    assert all(r.seconds >= f for r, f in zip(records, forward, strict=True))
    assert all(b.start > a.start for a, b in itertools.pairwise(records))
