"""Random arrivals and aborts on a pool too small for the load: preemption never changes a request's tokens."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.sampling import FinishReason, SamplingParams

MAX_TOKENS = 8
PARAMS = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)


@dataclass(frozen=True)
class Arrival:
    step: int
    prompt: tuple[int, ...]
    max_tokens: int
    abort_after: int | None  # steps after arrival; None runs to completion


arrivals = st.lists(
    st.builds(Arrival, st.integers(0, 12), st.lists(st.integers(3, 258), min_size=1, max_size=14).map(tuple),
              st.integers(1, MAX_TOKENS), st.none() | st.integers(0, 10)),
    min_size=1, max_size=7,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arrivals=arrivals, policy=st.sampled_from(["colocated", "chunked"]))
def test_preemption_keeps_greedy_tokens(make_engine, alone_tokens, arrivals: list[Arrival], policy: str) -> None:
    # 8 blocks of 4 tokens: one request fits (<= 22 tokens), a few together must preempt each other
    engine = make_engine(policy=policy, num_blocks=8, block_size=4, max_batch_tokens=8)
    outputs: dict[str, list[int]] = {}
    finished: dict[str, FinishReason] = {}
    step = 0
    while step <= 12 or engine.has_work():
        for i, a in enumerate(arrivals):
            rid = f"r{i}"
            if a.step == step:
                engine.add_request(rid, list(a.prompt), SamplingParams(max_tokens=a.max_tokens, ignore_eos=True))
                outputs[rid] = []
            if a.abort_after is not None and a.step + a.abort_after == step and rid not in finished:
                assert engine.abort(rid)
                finished[rid] = FinishReason.ABORT
        for out in engine.step():
            outputs[out.request_id].extend(out.new_token_ids)
            if out.finished:
                finished[out.request_id] = out.finish_reason
        step += 1
    assert engine.blocks.num_used == 0
    for i, a in enumerate(arrivals):
        rid = f"r{i}"
        expected = alone_tokens(a.prompt)[: a.max_tokens]
        if finished[rid] is FinishReason.ABORT:
            assert outputs[rid] == expected[: len(outputs[rid])]
        else:
            assert (finished[rid], outputs[rid]) == (FinishReason.LENGTH, expected)


def test_preemption_happens_and_recomputes(make_engine, alone_tokens) -> None:
    engine = make_engine(num_blocks=8, block_size=4)
    prompts = [tuple(range(10 + 12 * i, 22 + 12 * i)) for i in range(3)]  # 12 tokens = 3 blocks each
    preempted = []
    preempt = engine.scheduler._preempt
    engine.scheduler._preempt = lambda seq: preempted.append(seq.request_id) or preempt(seq)
    outs = engine.generate([list(p) for p in prompts], PARAMS)
    assert preempted
    assert outs == [alone_tokens(p) for p in prompts]
    assert engine.blocks.num_used == 0
