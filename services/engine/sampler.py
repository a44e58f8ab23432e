"""Turns last-position logits into tokens: greedy, or temperature / top-k / top-p with a per-request seed.

The draw for the token at position i uses a generator seeded from (seed, i), so a request's tokens do not
depend on what it was batched with, nor on which instance sampled which token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from services.common.sampling import TokenLogprobs
from services.engine.grammar import apply_masks
from services.engine.logits_processors import process
from services.engine.sequence import Sequence


@dataclass(slots=True)
class Sampled:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs | None] = field(default_factory=list)  # per token: None when not asked
    prompt_logprobs: dict[str, list[TokenLogprobs]] = field(default_factory=dict)  # request id → this step's

    def extend(self, other: Sampled) -> None:
        self.tokens.extend(other.tokens)
        self.logprobs.extend(other.logprobs)
        self.prompt_logprobs.update(other.prompt_logprobs)


def _generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (1 << 63))


def _sample_one(logits: torch.Tensor, seq: Sequence) -> int:
    p = seq.params
    # the largest logit shifted to 0 before scaling: a small temperature sends the others to -inf, never NaN
    logits = logits.float()
    logits = (logits - logits.max()) / p.temperature
    if 0 < p.top_k < logits.shape[-1]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if p.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= p.top_p
        drop[0] = False  # also when top_p rounds to 0 in float32
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return int(torch.multinomial(probs.cpu(), 1, generator=_generator(p.seed or 0, seq.num_tokens)))


def sample(logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: tuple[int, ...] = ()) -> Sampled:
    """logits: [B, V] for the B sequences → one new token each, with its logprobs (of the model's own
    distribution, before penalties, biases and grammars) where asked."""
    processed = apply_masks(process(logits, seqs, eos_token_ids), [s.grammar for s in seqs], [s.output_ids for s in seqs])
    greedy = processed.argmax(dim=-1).tolist()
    tokens = [greedy[i] if s.params.greedy else _sample_one(processed[i], s) for i, s in enumerate(seqs)]
    return Sampled(tokens, _logprobs(logits, seqs, tokens))


def _logprobs(logits: torch.Tensor, seqs: list[Sequence], tokens: list[int]) -> list[TokenLogprobs | None]:
    """One log-softmax and one top-k over the rows that asked, whatever their number."""
    out: list[TokenLogprobs | None] = [None] * len(seqs)
    rows = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
    if rows:
        picked = logits.index_select(0, torch.tensor(rows, device=logits.device))
        for i, item in zip(rows, token_logprobs(picked, [tokens[i] for i in rows], [seqs[i].params.logprobs for i in rows])):
            out[i] = item
    return out


def token_logprobs(logits: torch.Tensor, chosen: list[int], ks: list[int | None]) -> list[TokenLogprobs]:
    """logits [R, V] (the model's own) → per row: the log-probability of its chosen token and its top ks[r]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(1, torch.tensor(chosen, device=logits.device).unsqueeze(1)).squeeze(1).tolist()
    k = max(k or 0 for k in ks)
    top_values, top_ids = logp.topk(k, dim=-1) if k else (logp[:, :0], logp[:, :0].long())
    return [TokenLogprobs(token, value, tuple(zip(ids[: n or 0], values[: n or 0])))
            for token, value, ids, values, n in zip(chosen, picked, top_ids.tolist(), top_values.tolist(), ks)]
