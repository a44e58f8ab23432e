"""One instance on 1 or 2 threads (`cpu:a-b`) and a TP 2 instance: the same greedy tokens, logprobs within 1e-5."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.sampling import SamplingParams, TokenLogprobs
from services.engine.cpu import team
from services.engine.engine import EngineConfig, LLMEngine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PROMPTS = [[1, *range(100, 140)], [1, 72, 105, 33], [1, *(3 + (i * 37) % 256 for i in range(70))]]
PARAMS = SamplingParams(max_tokens=10, ignore_eos=True, logprobs=3)


def _generate(model_dir: str, tp: int = 1) -> dict[str, list[TokenLogprobs]]:
    """Every request's sampled tokens with their logprobs, the prompts prefilled in one batch and decoded together."""
    engine = LLMEngine(EngineConfig(model_dir, num_blocks=96, block_size=4, max_batch_tokens=512, tp=tp))
    try:
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(str(i), prompt, PARAMS)
        outs: dict[str, list[TokenLogprobs]] = {str(i): [] for i in range(len(PROMPTS))}
        while engine.has_work():
            for out in engine.step():
                outs[out.request_id].extend(out.logprobs)
    finally:
        engine.close()
    return outs


@pytest.fixture
def threads() -> Iterator[None]:
    yield
    team.set_team(1)


def test_two_threads_and_tp2_give_the_one_thread_tokens(tiny_llama_dir: str, threads) -> None:
    team.set_team(1)
    alone = _generate(tiny_llama_dir)
    team.set_team(2)
    for got in (_generate(tiny_llama_dir), _generate(tiny_llama_dir, tp=2)):
        for rid, want in alone.items():
            assert [t.token_id for t in got[rid]] == [t.token_id for t in want]
            assert max(abs(a.logprob - b.logprob) for a, b in zip(got[rid], want)) <= 1e-5
            assert all([i for i, _ in a.top] == [i for i, _ in b.top] for a, b in zip(got[rid], want))
