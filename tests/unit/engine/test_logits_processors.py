"""Penalties, biases and min_tokens: the batched ops equal a plain per-request reading of their definitions,
rows that ask for nothing are untouched, and the engine honours them end to end."""

from __future__ import annotations

import torch

from services.common.sampling import SamplingParams
from services.engine.logits_processors import process
from services.engine.sequence import Sequence


def _reference(logits: torch.Tensor, seq: Sequence, eos: tuple[int, ...]) -> torch.Tensor:
    p, row = seq.params, logits.clone().float()
    for t in set(seq.prompt_ids) | set(seq.output_ids):
        row[t] = row[t] / p.repetition_penalty if row[t] > 0 else row[t] * p.repetition_penalty
    for t in set(seq.output_ids):
        row[t] -= p.frequency_penalty * seq.output_ids.count(t) + p.presence_penalty
    for t, b in p.logit_bias:
        row[t] += b
    if len(seq.output_ids) < p.min_tokens:
        for t in (*eos, *p.stop_token_ids):
            row[t] = float("-inf")
    return row


def test_batched_processing_equals_the_definitions() -> None:
    gen = torch.Generator().manual_seed(0)
    vocab, eos = 50, (2,)
    params = [SamplingParams(), SamplingParams(presence_penalty=0.5, frequency_penalty=-0.3),
              SamplingParams(repetition_penalty=1.3, logit_bias=((7, 5.0), (9, -3.0))),
              SamplingParams(min_tokens=9, stop_token_ids=(11,), frequency_penalty=1.0),
              SamplingParams(repetition_penalty=0.8, presence_penalty=-1.0, min_tokens=2)]
    seqs = [Sequence(str(i), torch.randint(0, vocab, (6,), generator=gen).tolist(), p,
                     output_ids=torch.randint(0, vocab, (i * 3,), generator=gen).tolist()) for i, p in enumerate(params)]
    logits = torch.randn(len(seqs), vocab, generator=gen)
    got = process(logits, seqs, eos)
    for i, seq in enumerate(seqs):
        assert torch.allclose(got[i], _reference(logits[i], seq, eos), atol=1e-6), i
    assert torch.equal(got[0], logits[0])
    plain = logits[:1]
    assert process(plain, seqs[:1], eos) is plain  # nothing asked: nothing done


def test_the_engine_honours_bias_and_min_tokens(make_engine) -> None:
    engine = make_engine(num_blocks=64)
    eos = engine.model_config.eos_token_ids[0]
    biased = engine.generate([[1, 40, 41]], SamplingParams(max_tokens=5, ignore_eos=True, logit_bias=((77, 100.0),)))[0]
    assert biased == [77] * 5
    ends_at_once = SamplingParams(max_tokens=20, logit_bias=((eos, 100.0),))
    assert engine.generate([[1, 40, 41]], ends_at_once)[0] == [eos]
    ends_at_once.min_tokens = 6
    out = engine.generate([[1, 40, 41]], ends_at_once)[0]
    assert len(out) == 7 and out[-1] == eos and eos not in out[:-1]
