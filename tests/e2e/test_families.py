"""A sliding-window family served by the whole stack: Gemma 2 (interleaved sliding and global layers, soft-capping)
disaggregated, its K/V pulled through kvxfer, and chunked: greedy tokens and logprobs as transformers gives them,
again when the prompts come back and start from the prefix cache; every block comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.engine.make_model import make_model
from services.launcher.stack import Stack
from tests.e2e.helpers import generate, running_stack, wait_idle
from tests.family_reference import PARAMS, PROMPTS, assert_equal, reference

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]  # some 40 s: two stacks start
pytest.importorskip("transformers")

DB = 9


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model("tiny-gemma2", tmp_path_factory.mktemp("tiny-gemma2")))


@pytest.fixture(scope="module", params=["disagg", "chunked"])
def stack(request, gemma2: str, redis_url: str) -> Iterator[Stack]:
    # chunked: one instance (so the prompts come back to its cache), 8-token chunks: the long prompt's chunks
    # attend over cached blocks, each chunk shorter than the window
    chunked = {"devices": ("cpu:0",), "max_batch_tokens": 8} if request.param == "chunked" else {}
    with running_stack(gemma2, f"{redis_url.rsplit('/', 1)[0]}/{DB}", mode=request.param, **chunked) as stack:
        yield stack


async def test_tokens_and_logprobs_equal_transformers(stack: Stack, gemma2: str) -> None:
    want = reference(gemma2)
    for _ in range(2):  # the second time from the prefix cache
        results = await asyncio.gather(*(
            generate(stack.router_address, prompt_ids=prompt, max_tokens=PARAMS.max_tokens, temperature=0.0,
                     ignore_eos=True, logprobs=1) for prompt in PROMPTS))
        for responses, expected in zip(results, want):
            assert_equal([t for r in responses for t in r.token_ids],
                         [lp.logprob for r in responses for lp in r.logprobs], expected)
        await wait_idle(stack)
        await asyncio.sleep(1.2)  # the instances' next beat tells the router's index what they cache
    assert max(responses[-1].cached_tokens, responses[-1].decode_cached_tokens) > 0  # the prefill's cache, or the decode's
    stats = await wait_idle(stack)
    assert [s.blocks_used for s in stats] == [0] * len(stats)
