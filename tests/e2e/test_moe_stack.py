"""DeepSeek-V3 (latent attention, grouped sigmoid routing, shared experts) served disaggregated by the whole stack:
greedy tokens and logprobs as transformers gives them, and kvxfer moves per token and layer only the latent and
the rotary key: its pulled bytes are layers × pulled tokens × (kv_lora_rank + qk_rope_head_dim) × 4 (fp32)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.common import defaults
from services.common.model_config import ModelConfig
from services.engine.make_model import make_model
from services.kvxfer.client import KVXferClient
from services.launcher.stack import Stack
from tests.e2e.helpers import generate, running_stack, wait_idle
from tests.integration.engine.family_reference import PARAMS, PROMPTS, assert_equal, reference

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]  # some 30 s: a stack starts
pytest.importorskip("transformers")

DB = 10


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model("tiny-deepseek-v3", tmp_path_factory.mktemp("tiny-deepseek-v3")))


@pytest.fixture(scope="module")
def stack(deepseek: str, redis_url: str) -> Iterator[Stack]:
    with running_stack(deepseek, f"{redis_url.rsplit('/', 1)[0]}/{DB}", mode="disagg") as stack:
        yield stack


async def _bytes_pulled(address: str) -> int:
    client = KVXferClient(address)
    try:
        return (await client.stats()).bytes_pulled
    finally:
        await client.close()


async def test_tokens_equal_transformers_and_kvxfer_moves_only_the_latent(stack: Stack, deepseek: str) -> None:
    before = await _bytes_pulled(stack.kvxfer_address)
    results = await asyncio.gather(*(
        generate(stack.router_address, prompt_ids=prompt, max_tokens=PARAMS.max_tokens, temperature=0.0,
                 ignore_eos=True, logprobs=1) for prompt in PROMPTS))
    for responses, expected in zip(results, reference(deepseek)):
        assert_equal([t for r in responses for t in r.token_ids],
                     [lp.logprob for r in responses for lp in r.logprobs], expected)
    await wait_idle(stack)
    config = ModelConfig.from_folder(deepseek)
    assert config.mla is not None
    tokens = sum(-(-len(p) // defaults.BLOCK_SIZE) * defaults.BLOCK_SIZE for p in PROMPTS)  # whole blocks move
    moved = await _bytes_pulled(stack.kvxfer_address) - before
    assert moved == config.num_layers * tokens * (config.mla.kv_lora_rank + config.mla.rope_dim) * 4
