"""Penalties, logit biases and min_tokens, applied to a step's logits in a few batched tensor ops.

Rows that ask for nothing are left alone; the work per step is a handful of index operations over the
batch, whatever the number of requests that ask (no tensor op per request).
"""

from __future__ import annotations

from itertools import chain

import torch

from services.engine.sequence import Sequence


def _flat(seqs: list[Sequence], rows: list[int], ids_of) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, token id) pairs of every listed id of every row, as two index tensors."""
    lists = [ids_of(seqs[r]) for r in rows]
    row_index = list(chain.from_iterable([j] * len(ids) for j, ids in enumerate(lists)))
    return torch.tensor(row_index, dtype=torch.long), torch.tensor(list(chain.from_iterable(lists)), dtype=torch.long)


def process(logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: tuple[int, ...]) -> torch.Tensor:
    """logits [B, V] → the logits to sample from (a new tensor when anything applies, else the same one)."""
    rows = [i for i, s in enumerate(seqs) if s.params.processes_logits]
    if not rows:
        return logits
    dev = logits.device
    index = torch.tensor(rows, device=dev)
    sub = logits.index_select(0, index).float()
    ps = [seqs[r].params for r in rows]
    vocab = sub.shape[-1]

    out_rows, out_ids = _flat(seqs, rows, lambda s: s.output_ids)
    counts = torch.zeros(len(rows), vocab, device=dev)
    counts.index_put_((out_rows.to(dev), out_ids.to(dev)), torch.ones(len(out_ids), device=dev), accumulate=True)
    if any(p.repetition_penalty != 1.0 for p in ps):
        # HF/vLLM rule: a token seen in the prompt or output has its logit divided (positive) or multiplied by it
        pr_rows, pr_ids = _flat(seqs, rows, lambda s: s.prompt_ids)
        seen = counts > 0
        seen[pr_rows.to(dev), pr_ids.to(dev)] = True
        rep = torch.tensor([p.repetition_penalty for p in ps], device=dev).unsqueeze(1)
        scaled = torch.where(sub > 0, sub / rep, sub * rep)
        sub = torch.where(seen, scaled, sub)
    freq = torch.tensor([p.frequency_penalty for p in ps], device=dev).unsqueeze(1)
    presence = torch.tensor([p.presence_penalty for p in ps], device=dev).unsqueeze(1)
    sub = sub - freq * counts - presence * (counts > 0).float()

    bias_rows = [j for j, p in enumerate(ps) for _ in p.logit_bias]
    if bias_rows:
        ids = [t for p in ps for t, _ in p.logit_bias]
        values = torch.tensor([b for p in ps for _, b in p.logit_bias], device=dev)
        sub.index_put_((torch.tensor(bias_rows, device=dev), torch.tensor(ids, device=dev)), values, accumulate=True)

    short = [j for j, (r, p) in enumerate(zip(rows, ps)) if len(seqs[r].output_ids) < p.min_tokens]
    if short:  # too early to end: the end tokens cannot be drawn
        ends = [(j, t) for j in short for t in (*(() if ps[j].ignore_eos else eos_token_ids), *ps[j].stop_token_ids)]
        if ends:
            end_rows, end_ids = zip(*ends)
            sub[torch.tensor(end_rows, device=dev), torch.tensor(end_ids, device=dev)] = float("-inf")
    result = logits.float().clone()
    result.index_copy_(0, index, sub)
    return result
