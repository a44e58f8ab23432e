"""The 2026 families (Qwen3, Mistral, Gemma 2, Gemma 3, Phi-3) against `transformers` on the checkpoints its own
classes wrote: greedy tokens and their logprobs (fp32, 1e-4) at a prompt shorter than the sliding window and one
4x longer (past Phi-3's original context too), colocated, chunked and disaggregated, each prompt run twice so
the second run starts from the prefix cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
import torch

from services.common.sampling import TokenLogprobs
from services.engine.engine import EngineConfig, LLMEngine, StepOutput
from services.engine.make_model import make_model, write_tokenizer
from services.engine.preset_configs import FAMILY_PRESETS, MOE_PRESETS
from tests.family_reference import LONG, PARAMS, PROMPTS, assert_equal, reference

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

MODES = {  # mode → (policy, Lm or token budget): chunked cuts LONG into 9 chunks, each shorter than the window
    "colocated": ("colocated", 512), "chunked": ("chunked", 8), "disaggregated": ("prefill", 512)}


@dataclass(slots=True)
class Generated:
    tokens: list[int]
    logprobs: list[TokenLogprobs]
    cached: int  # prompt tokens its K/V came from the prefix cache for


@pytest.fixture(scope="module", params=[*FAMILY_PRESETS, *MOE_PRESETS])
def family(request, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model(request.param, tmp_path_factory.mktemp(request.param)))


@pytest.fixture(scope="module")
def want(family: str) -> list[tuple[list[int], torch.Tensor]]:
    return reference(family)


def _record(outs: dict[str, Generated], out: StepOutput) -> None:
    got = outs.setdefault(out.request_id, Generated([], [], out.num_cached_tokens))
    got.tokens.extend(out.new_token_ids)
    got.logprobs.extend(out.logprobs)


def _run(engine: LLMEngine, decode: LLMEngine | None, prompts: list[list[int]]) -> list[Generated]:
    """The prompts to completion; with `decode`, `engine` prefills and each request's blocks are copied into
    blocks reserved on `decode` (as kvxfer's pull does), which goes on from there."""
    outs: dict[str, Generated] = {}
    rids = [f"r{i}" for i in range(len(prompts))]
    for rid, prompt in zip(rids, prompts):
        engine.add_request(rid, prompt, replace(PARAMS))
    while engine.has_work() or (decode is not None and decode.has_work()):
        for out in engine.step():
            _record(outs, out)
            if out.prefilled:
                prompt = prompts[rids.index(out.request_id)]
                held = engine.prefilled[out.request_id]
                blocks = decode.reserve_blocks(len(prompt))
                decode.runner.pool.tensor[blocks] = engine.runner.pool.tensor[held.block_ids]
                decode.add_prefilled(out.request_id, prompt, out.new_token_ids[0], replace(PARAMS), blocks)
                engine.release_prefilled(out.request_id)
        for out in decode.step() if decode is not None else ():
            _record(outs, out)
    return [outs[rid] for rid in rids]


def _assert_equal(got: Generated, want: tuple[list[int], torch.Tensor]) -> None:
    assert [t.token_id for t in got.logprobs] == got.tokens
    assert_equal(got.tokens, [t.logprob for t in got.logprobs], want)


@pytest.fixture
def engines(family: str) -> Iterator[Callable[[str, int], LLMEngine]]:
    made: list[LLMEngine] = []

    def build(policy: str, budget: int) -> LLMEngine:
        made.append(LLMEngine(EngineConfig(family, policy=policy, num_blocks=96, block_size=4, max_batch_tokens=budget)))
        return made[-1]

    yield build
    for engine in made:
        engine.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_tokens_and_logprobs_equal_transformers(engines, want, mode: str) -> None:
    policy, budget = MODES[mode]
    engine = engines(policy, budget)
    decode = engines("decode", budget) if policy == "prefill" else None
    if decode is not None:  # scattered free list: pulled blocks land at other ids than the prefill's
        decode.blocks.free(decode.blocks.allocate(decode.blocks.num_free)[::-1])
    first, again = _run(engine, decode, PROMPTS), _run(engine, decode, PROMPTS)
    for got, expected in zip(first + again, want + want):
        _assert_equal(got, expected)
    assert [g.cached for g in first] == [0, 0]
    # every full block before the last prompt token (which is computed to sample from) comes from the cache
    assert [g.cached for g in again] == [(len(p) - 1) // 4 * 4 for p in PROMPTS]


def _assert_ranks_equal_transformers(folder: str, policy: str, budget: int, tp: int = 2, pp: int = 1,
                                     ep: int = 0) -> None:
    """The prompts on an instance of TP x PP rank processes (`ep` expert groups), twice, the second time from the
    prefix cache: transformers' tokens and logprobs."""
    engine = LLMEngine(EngineConfig(folder, policy=policy, num_blocks=96, block_size=4, max_batch_tokens=budget,
                                    tp=tp, pp=pp, ep=ep))
    try:
        first, again = _run(engine, None, PROMPTS), _run(engine, None, PROMPTS)
    finally:
        engine.close()
    want = reference(folder)
    for g, expected in zip(first + again, want + want):
        _assert_equal(g, expected)
    assert [g.cached for g in again] == [(len(p) - 1) // 4 * 4 for p in PROMPTS]


@pytest.mark.long  # some 30 s: rank processes start
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("preset", "policy", "tp", "pp", "ep"), [
    ("tiny-qwen2-moe", "colocated", 2, 1, 0), ("tiny-qwen2-moe", "chunked", 2, 1, 0), ("tiny-qwen2-moe", "chunked", 1, 2, 0),
    ("tiny-deepseek-v3", "chunked", 1, 2, 0), ("tiny-deepseek-v3", "chunked", 2, 1, 0),
    ("tiny-mixtral", "colocated", 2, 1, 1), ("tiny-mixtral", "chunked", 2, 1, 2), ("tiny-qwen3-moe", "chunked", 2, 1, 1),
    ("tiny-qwen3-moe", "colocated", 2, 1, 2), ("tiny-qwen2-moe", "chunked", 2, 1, 1),
    ("tiny-deepseek-v3", "colocated", 2, 1, 1), ("tiny-qwen2-moe", "chunked", 2, 2, 1)])
def test_moe_on_ranks_equals_transformers(preset: str, policy: str, tp: int, pp: int, ep: int,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """TP 2 with EP = TP (ep 0) or EP 2: the experts split over 2 rank processes, 4 whole experts each; with EP 1:
    all 8 on each rank, each at half its width (expert TP). The shared expert and the dense first layer's MLP
    split by columns; one all-reduce per MoE layer either way. PP 2: the dense layer on one stage, the sparse one
    on the other (DeepSeek-V3's latent attention in both); TP 2 x PP 2 x EP 1: 4 ranks, the sparse stage's experts
    sliced over its 2."""
    _assert_ranks_equal_transformers(str(make_model(preset, tmp_path_factory.mktemp(preset))), policy,
                                     MODES[policy][1], tp, pp, ep)


@pytest.mark.long  # some 30 s: rank processes start
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("preset", "tp", "pp"), [("tiny-gemma2", 2, 1), ("tiny-gemma3", 1, 2)])
def test_sliding_window_families_on_ranks_equal_transformers(preset: str, tp: int, pp: int,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Chunked, on rank processes: Gemma 2 with TP 2 (gloo, one KV head each), the sliding-window family with the
    most parts; Gemma 3 with PP 2, whose stages hold different layers of its layer groups (a sliding and the full
    layer, then a sliding one: each stage's pool has its own slots of the groups' blocks)."""
    _assert_ranks_equal_transformers(str(make_model(preset, tmp_path_factory.mktemp(preset))), "chunked", 8, tp, pp)


@pytest.mark.parametrize("preset", [*FAMILY_PRESETS, *MOE_PRESETS])
def test_bf16_logits_equal_transformers_in_bf16(preset: str, tmp_path) -> None:
    """In bf16 the norms round where transformers rounds (Gemma scales in float32; Llama casts, then scales):
    the prompt's logits equal transformers' in bf16 (measured: bit for bit), well inside bf16's usual 1e-2."""
    folder = str(make_model(preset, tmp_path, overrides={"torch_dtype": "bfloat16"}))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    engine = LLMEngine(EngineConfig(folder, num_blocks=64, block_size=4))
    try:
        assert engine.layout.dtype == "bfloat16"
        ours = engine.runner.full_logits(LONG, list(range(engine.groups.count * engine.blocks.blocks_for(len(LONG))))).float()
    finally:
        engine.close()
    with torch.no_grad():
        theirs = model(torch.tensor([LONG])).logits[0].float()
    assert (ours - theirs).abs().max().item() <= 1e-2


@pytest.mark.long  # building transformers' multimodal model takes some 10 s (its vision tower's imports)
def test_gemma3_multimodal_checkpoint_serves_its_language_model(tmp_path) -> None:
    """Gemma 3 as published from 4B up: Gemma3ForConditionalGeneration, a vision tower and projector beside the
    language model (named language_model.model.*). Its language model is served: the prompt's logits equal those of
    transformers' whole model given the text alone (fp32, 1e-4)."""
    text = {k: v for k, v in FAMILY_PRESETS["tiny-gemma3"].items() if k not in ("architectures", "torch_dtype")}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 28, "patch_size": 14}
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(
        transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)).eval()
    model.save_pretrained(tmp_path)
    write_tokenizer(tmp_path, text["vocab_size"])
    engine = LLMEngine(EngineConfig(str(tmp_path), num_blocks=64, block_size=4))
    try:
        ours = engine.runner.full_logits(LONG, list(range(engine.groups.count * engine.blocks.blocks_for(len(LONG)))))
    finally:
        engine.close()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([LONG])).logits[0]
    assert (ours - theirs).abs().max().item() <= 1e-4
