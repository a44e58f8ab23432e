"""Mixture-of-experts models served disaggregated by the whole stack, greedy tokens and logprobs as transformers
gives them: DeepSeek-V3 (latent attention, grouped sigmoid routing, shared experts), where kvxfer moves per token
and layer only the latent and the rotary key (its pulled bytes are layers × pulled tokens × (kv_lora_rank +
qk_rope_head_dim) × 4, fp32); and Qwen2-MoE and DeepSeek-V3 with their experts split over 2 ranks on each side
(EP 2 = TP 2; DeepSeek-V3's heads split, its latent on every rank, so a decode rank pulls whole blocks); and Mixtral
and Qwen3-MoE at TP 2 on each side with EP 2 on one and EP 1 (each expert split over both ranks) on the other: the
KV does not depend on EP, so the pull is the same; and Mixtral from a TP 2 x EP 1 prefill to a TP 1 decode (a
re-sharded pull). Each prompt again from the prefix cache."""

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
from tests.family_reference import PARAMS, PROMPTS, assert_equal, reference

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]  # some 30 s: a stack starts
pytest.importorskip("transformers")

DB, EP2_DB = 10, 12  # one each: the two module-scoped stacks live at once


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model("tiny-deepseek-v3", tmp_path_factory.mktemp("tiny-deepseek-v3")))


@pytest.fixture(scope="module")
def stack(deepseek: str, redis_url: str) -> Iterator[Stack]:
    with running_stack(deepseek, f"{redis_url.rsplit('/', 1)[0]}/{DB}", mode="disagg") as stack:
        yield stack


TP2 = {"prefill_tp": 2, "decode_tp": 2, "devices": ("cpu:0", "cpu:1", "cpu:0", "cpu:1")}
EXPERT_LAYOUTS = {  # case → (preset, the stack's layout); without --ep, EP = TP
    "qwen2-moe": ("tiny-qwen2-moe", TP2), "deepseek-v3": ("tiny-deepseek-v3", TP2),
    "mixtral-ep2-to-ep1": ("tiny-mixtral", {**TP2, "prefill_ep": 2, "decode_ep": 1}),
    "qwen3-moe-ep1-to-ep2": ("tiny-qwen3-moe", {**TP2, "prefill_ep": 1, "decode_ep": 2}),
    # re-sharding: a TP 1 decode pulls each block's heads from both prefill ranks, whose experts are sliced
    "mixtral-tp2-ep1-to-tp1": ("tiny-mixtral", {"prefill_tp": 2, "prefill_ep": 1, "devices": ("cpu:0", "cpu:1", "cpu:0")}),
}


@pytest.fixture(scope="module", params=list(EXPERT_LAYOUTS))
def ep2_stack(request, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    preset, layout = EXPERT_LAYOUTS[request.param]
    folder = str(make_model(preset, tmp_path_factory.mktemp(request.param)))
    with running_stack(folder, f"{redis_url.rsplit('/', 1)[0]}/{EP2_DB}", mode="disagg", **layout) as stack:
        yield stack, folder


async def _assert_served_as_transformers(stack: Stack, folder: str) -> list[int]:
    """Each prompt's tokens and logprobs are transformers'; returns its prompt tokens a prefix cache held."""
    results = await asyncio.gather(*(
        generate(stack.router_address, prompt_ids=prompt, max_tokens=PARAMS.max_tokens, temperature=0.0,
                 ignore_eos=True, logprobs=1) for prompt in PROMPTS))
    for responses, expected in zip(results, reference(folder)):
        assert_equal([t for r in responses for t in r.token_ids],
                     [lp.logprob for r in responses for lp in r.logprobs], expected)
    return [responses[-1].cached_tokens for responses in results]


async def _bytes_pulled(address: str) -> int:
    client = KVXferClient(address)
    try:
        return (await client.stats()).bytes_pulled
    finally:
        await client.close()


async def test_tokens_equal_transformers_and_kvxfer_moves_only_the_latent(stack: Stack, deepseek: str) -> None:
    before = await _bytes_pulled(stack.kvxfer_address)
    await _assert_served_as_transformers(stack, deepseek)
    await wait_idle(stack)
    config = ModelConfig.from_folder(deepseek)
    assert config.mla is not None
    tokens = sum(-(-len(p) // defaults.BLOCK_SIZE) * defaults.BLOCK_SIZE for p in PROMPTS)  # whole blocks move
    moved = await _bytes_pulled(stack.kvxfer_address) - before
    assert moved == config.num_layers * tokens * (config.mla.kv_lora_rank + config.mla.rope_dim) * 4


async def test_experts_split_over_two_ranks_on_each_side_equal_transformers(ep2_stack: tuple[Stack, str]) -> None:
    stack, folder = ep2_stack
    assert await _assert_served_as_transformers(stack, folder) == [0] * len(PROMPTS)
    again = await _assert_served_as_transformers(stack, folder)  # each full block before the last token: cached
    assert again == [(len(p) - 1) // defaults.BLOCK_SIZE * defaults.BLOCK_SIZE for p in PROMPTS]
    stats = await wait_idle(stack)
    assert [s.blocks_used for s in stats] == [0] * len(stats)
