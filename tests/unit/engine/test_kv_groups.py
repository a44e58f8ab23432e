"""Layer groups (services/common/kv_groups.py): how published layer patterns group, and a sliding-window model's
pool use, which stays within its window as the prompt grows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.kv_groups import NULL_BLOCK, KVGroups
from services.common.model_config import FULL, SLIDING, ModelConfig
from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model

WINDOW, BLOCK = 16, 4


def config(types: list[str], window: int | None = 4096) -> ModelConfig:
    return ModelConfig("llama", 256, 64, 128, len(types), 4, 2, 8192, (2,), layer_types=tuple(types),
                       sliding_window=window)


def test_gemma3_layers_group_by_the_smallest_kind_full_first() -> None:
    types = [FULL if (i + 1) % 6 == 0 else SLIDING for i in range(26)]  # Gemma 3 4B's pattern: 22 sliding, 4 full
    groups = KVGroups.of_model(config(types), 16)
    assert [len(g.layers) for g in groups.groups] == [4] + [4] * 5 + [2]
    assert groups.groups[0].window is None and groups.groups[0].layers == (5, 11, 17, 23)
    assert groups.slots(0, 26) == 4 and groups.num_layers == 26
    # a pipeline stage's pool holds its layers of each group: layers 13..25 take 2 slots of the full group
    assert groups.slots(13, 26) == 4 and groups.placement(13, 26)[4] == (0, 0)  # layer 17


def test_one_kind_of_layer_is_one_group_of_every_layer() -> None:
    for types, window in (([FULL] * 5, None), ([SLIDING] * 5, 64)):
        groups = KVGroups.of_model(config(types, window), 16)
        assert groups.count == 1 and groups.slots(0, 5) == 5 and groups.placement(0, 5)[3] == (0, 3)


def test_flat_blocks_are_each_groups_kept_blocks_in_turn() -> None:
    groups = KVGroups.of_model(config([SLIDING, FULL], 8), 4)
    tables = [[10, 11, 12, 13, 14], [NULL_BLOCK, NULL_BLOCK, 22, 23, 24]]  # 18 tokens: the window from token 10 on
    assert groups.flat(tables, 18) == [10, 11, 12, 13, 14, 22, 23, 24]
    assert groups.tables(groups.flat(tables, 18), 18) == tables
    assert groups.missing(18, 3, 18) == [(0, 3), (0, 4), (1, 6), (1, 7)]
    assert groups.missing(18, 0, 30) is None  # a handle of 30 tokens no longer holds the window of 18
    assert groups.peak_blocks(18, 20, 18) == 5 + 5  # the prompt in one step: all of its blocks in both groups
    assert groups.peak_blocks(18, 40, 4) == 10 + (8 + 1) // 4 + 2  # at the last token: the window and 2 blocks


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model("tiny-mistral", tmp_path_factory.mktemp("tiny-mistral")))


@pytest.mark.parametrize("policy", ["colocated", "chunked"])
def test_a_sliding_model_holds_its_window_whatever_the_prompt(mistral: str, policy: str) -> None:
    """Every layer of tiny-mistral slides: after its prompt a sequence holds the window's blocks (and one more
    where it straddles one), from 2x to 8x the window, as it decodes too."""
    engine = LLMEngine(EngineConfig(mistral, policy=policy, num_blocks=64, block_size=BLOCK, max_batch_tokens=64))
    try:
        held = []
        for times in (2, 4, 8):
            engine.add_request(f"r{times}", [1, *range(3, 3 + times * WINDOW)], SamplingParams(max_tokens=6, ignore_eos=True))
            most = 0
            while engine.has_work():
                engine.step()
                if not engine.scheduler.waiting and all(s.num_computed >= len(s.prompt_ids) for s in engine.scheduler.running):
                    most = max(most, engine.blocks.num_used)
            held.append(most)
            assert engine.blocks.num_used == 0
        assert held[0] <= WINDOW // BLOCK + 2 and held == held[:1] * 3
    finally:
        engine.close()


def test_pool_of_one_window_serves_prompts_eight_times_longer(mistral: str) -> None:
    """Pool use bounded by the window lets a pool far smaller than the prompt serve it (chunked prefill: each chunk's
    blocks and the window), with the tokens of a pool that holds it all."""
    prompt = [1, *range(3, 3 + 8 * WINDOW)]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    small = LLMEngine(EngineConfig(mistral, policy="chunked", num_blocks=16, block_size=BLOCK, max_batch_tokens=16))
    large = LLMEngine(EngineConfig(mistral, policy="chunked", num_blocks=64, block_size=BLOCK, max_batch_tokens=16))
    try:
        assert small.generate([prompt], replace(params)) == large.generate([prompt], replace(params))
    finally:
        small.close()
        large.close()
