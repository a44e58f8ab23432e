"""Sliding-window K/V through P/D on real gRPC servers and a real kvxfer (services/common/kv_groups.py): a Gemma 3
model (sliding, full, sliding layers; window 16, blocks of 4) keeps, hands over and pulls of each sliding layer only
the blocks of its window, so the bytes a decode pulls for its sliding layers stay the same as the prompt grows from
2x to 8x the window; the tokens are those of the same engine colocated, and every path of a follow-up turn (a delta
pull, a reverse pull, a local prefill) gives those of caching off, leaving no block held and no lease live."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model
from tests.integration.kvxfer.multi_turn import PARAMS, Path, start_pair, turn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
WINDOW, BLOCK = 16, 4
SYSTEM = [1, *range(100, 137)]  # 38 tokens: more than twice the window


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model("tiny-gemma3", tmp_path_factory.mktemp("tiny-gemma3")))


def colocated(model: str, prompt: list[int]) -> list[int]:
    engine = LLMEngine(EngineConfig(model, num_blocks=256, block_size=BLOCK, prefix_caching="off"))
    try:
        return engine.generate([prompt], replace(PARAMS))[0]
    finally:
        engine.close()


async def test_sliding_layers_pull_only_their_window_as_the_prompt_grows(gemma3: str, start_kvxfer) -> None:
    host = await start_kvxfer()
    pair = await start_pair(gemma3, host.address, "sw", "off", num_blocks=256)
    try:
        groups, layout = pair.decode_engine.groups, pair.decode_engine.layout
        assert [g.window for g in groups.groups] == [None, WINDOW, WINDOW] and layout.num_layers == 1
        sliding = []
        for times in (2, 4, 8):
            prompt = [1, *(3 + i % 250 for i in range(times * WINDOW + 1))]  # 2 over whole blocks: the window straddles one
            before = (await pair.kv.stats()).bytes_pulled
            got = await turn(pair, f"x{times}", prompt, "disagg")
            moved = (await pair.kv.stats()).bytes_pulled - before
            full = groups.blocks_for(len(prompt))
            assert moved % layout.block_bytes == 0
            sliding.append(moved // layout.block_bytes - full)  # blocks of the two sliding layers
            assert got.tokens == colocated(gemma3, prompt)
        # the window's blocks (one more where it straddles a block), whatever the prompt's length
        assert sliding[0] <= 2 * (WINDOW // BLOCK + 1) and sliding == sliding[:1] * 3
        assert await pair.settled()
    finally:
        for close in pair.closers:
            await close()


@pytest.mark.parametrize("path", ["disagg", "reverse", "local"])
async def test_a_follow_up_turn_by_each_path_equals_caching_off(gemma3: str, start_kvxfer, path: Path) -> None:
    host = await start_kvxfer()
    on = await start_pair(gemma3, host.address, f"on-{path}", "on")
    off = await start_pair(gemma3, host.address, f"off-{path}", "off")
    try:
        results = []
        for pair in (on, off):
            first = await turn(pair, "t1", SYSTEM, "disagg")
            before = await pair.computed()
            second = await turn(pair, "t2", SYSTEM + first.tokens + [11, 12, 13, 14, 15], path)
            after = await pair.computed()
            results.append((first.tokens, second.tokens, second.logprobs, sum(after) - sum(before)))
            assert await pair.settled()
        (t1, t2, lp2, computed), (c1, c2, clp2, cold_computed) = results
        assert (t1, t2) == (c1, c2) and lp2 == pytest.approx(clp2, abs=1e-4)
        assert computed < cold_computed  # the cache spared computation on every path
    finally:
        for pair in (on, off):
            for close in pair.closers:
                await close()
