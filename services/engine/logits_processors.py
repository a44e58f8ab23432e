"""Penalties, logit biases and min_tokens, applied to a step's logits in a few batched tensor ops.

Only the entries they touch (the tokens a request has seen, biased or must not end with) are read and
written, as flat (row * vocab + token) indices over the whole batch: one copy of the logits, then a handful
of sparse ops per step, whatever the number of requests that ask (no tensor op per request).
"""

from __future__ import annotations

from itertools import chain

import torch

from services.engine.sequence import Sequence


def _keys(seqs: list[Sequence], rows: list[int], ids_of, vocab: int, device: torch.device) -> torch.Tensor:
    """Flat indices row * vocab + id of every listed id of every row (repeats kept)."""
    flat = list(chain.from_iterable((r * vocab + t for t in ids_of(seqs[r])) for r in rows))
    return torch.tensor(flat, dtype=torch.long, device=device)


def process(logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: tuple[int, ...]) -> torch.Tensor:
    """logits [B, V] → the logits to sample from (a new tensor when anything applies, else the same one)."""
    rows = [i for i, s in enumerate(seqs) if s.params.processes_logits]
    if not rows:
        return logits
    dev, vocab = logits.device, logits.shape[-1]
    out = logits.float().clone()
    flat = out.view(-1)

    def per_row(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, device=dev)

    params = [s.params for s in seqs]
    penalised = [r for r in rows if params[r].presence_penalty or params[r].frequency_penalty or params[r].repetition_penalty != 1.0]
    if penalised:
        generated = _keys(seqs, penalised, lambda s: s.output_ids, vocab, dev)
        seen, counts = torch.unique(generated, return_counts=True)
        if any(params[r].repetition_penalty != 1.0 for r in penalised):
            # HF/vLLM rule: a token of the prompt or the output has its logit divided (if positive) or multiplied by it
            everything = torch.unique(torch.cat([generated, _keys(seqs, penalised, lambda s: s.prompt_ids, vocab, dev)]))
            rep = per_row([p.repetition_penalty for p in params])[everything // vocab]
            v = flat[everything]
            flat[everything] = torch.where(v > 0, v / rep, v * rep)
        owner = seen // vocab
        freq, presence = per_row([p.frequency_penalty for p in params]), per_row([p.presence_penalty for p in params])
        flat[seen] -= freq[owner] * counts + presence[owner]

    biased = [r for r in rows if params[r].logit_bias]
    if biased:
        keys = torch.tensor([r * vocab + t for r in biased for t, _ in params[r].logit_bias], device=dev)
        flat.index_put_((keys,), per_row([b for r in biased for _, b in params[r].logit_bias]), accumulate=True)

    ends = [r * vocab + t for r in rows if len(seqs[r].output_ids) < params[r].min_tokens
            for t in (*(() if params[r].ignore_eos else eos_token_ids), *params[r].stop_token_ids)]
    if ends:  # too early to end: the end tokens cannot be drawn
        flat[torch.tensor(ends, device=dev)] = float("-inf")
    return out
