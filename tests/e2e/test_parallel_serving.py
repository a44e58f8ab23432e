"""Disaggregated serving between differing TP/PP layouts: a decode instance pulls exactly its layers and heads
from the prefill's rank pools, and the tokens equal in-process generation."""

from __future__ import annotations

import asyncio
import random

import pytest

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import generate, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORDS = "each phase of a request picks its own parallelism and its own instances".split()
LAYOUTS = {  # (prefill TP, PP) → (decode TP, PP)
    "prefill-tp2-to-decode-tp1": dict(prefill_tp=2),
    "prefill-tp1-to-decode-tp2": dict(decode_tp=2),
    "prefill-pp2-to-decode-pp1": dict(prefill_pp=2),
}


def _workload(n: int) -> list[tuple[str, int]]:
    rng = random.Random(1)
    return [(" ".join(rng.choices(WORDS, k=rng.randint(1, 40))), rng.randint(2, 16)) for _ in range(n)]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_tokens_equal_local_generation_across_layouts(layout: str, tiny_llama_dir: str, redis_url: str) -> None:
    workload = _workload(12)
    tokenizer = load_tokenizer(tiny_llama_dir)
    reference = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=512))
    try:
        expected = reference.generate([tokenizer.encode(p) for p, _ in workload],
                                      [SamplingParams(max_tokens=m) for _, m in workload])
    finally:
        reference.close()
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", **LAYOUTS[layout]) as stack:
        results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                         for prompt, m in workload))
        for responses, want in zip(results, expected):
            assert [t for r in responses for t in r.token_ids] == want
        stats = await wait_idle(stack)
        assert [s.blocks_used for s in stats] == [0] * len(stats)  # every lease released, every block back
