"""Decoding over scattered paged blocks gives the logits of one contiguous prefill of the whole sequence."""

from __future__ import annotations

import random

import pytest
import torch

from services.common.sampling import SamplingParams


def _scatter_free_blocks(engine, seed: int) -> None:
    """Leaves the pool's free list in a random order, so sequences get non-contiguous, shuffled blocks."""
    taken = engine.blocks.allocate(engine.blocks.num_free)
    random.Random(seed).shuffle(taken)
    engine.blocks.free(taken)


@pytest.mark.parametrize("model", ["tiny_llama_dir", "tiny_opt_dir"])
def test_scattered_decode_equals_contiguous_recompute(make_engine, model, request) -> None:
    engine = make_engine(model=request.getfixturevalue(model), num_blocks=64, block_size=4)
    _scatter_free_blocks(engine, seed=7)
    logits_seen: list[torch.Tensor] = []
    compute_logits = engine.runner.model.compute_logits
    engine.runner.model.compute_logits = lambda h: logits_seen.append(compute_logits(h)) or logits_seen[-1]

    prompts = [[1, *range(30, 30 + n)] for n in (3, 10, 17)]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    assert engine.blocks.num_used == 0

    # step 0 is the prefill of all three; each later step decodes one token of each prompt
    per_step = [rows.unbind(0) for rows in logits_seen]
    contiguous = list(range(engine.blocks.blocks_for(64)))
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        full = engine.runner.full_logits(prompt + out[:-1], contiguous)  # [len(prompt) + 11, V]
        paged = torch.stack([step[i] for step in per_step])                # [12, V]
        torch.testing.assert_close(paged, full[len(prompt) - 1 :], atol=1e-4, rtol=0)
        assert full[len(prompt) - 1 :].argmax(-1).tolist() == out
