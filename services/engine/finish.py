"""When a request ends: a stop token (EOS unless ignored, or one of its stop ids), its grammar's end, its max_tokens,
or the model's length."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.sampling import FinishReason
from services.engine.sequence import Sequence


@dataclass(frozen=True, slots=True)
class FinishRule:
    eos_token_ids: frozenset[int]
    max_position: int

    def __call__(self, seq: Sequence, token: int) -> FinishReason | None:
        """Why `seq` ends with `token` (already appended), or None while it goes on."""
        p = seq.params
        if (not p.ignore_eos and token in self.eos_token_ids) or token in p.stop_token_ids:
            return FinishReason.STOP
        if seq.grammar is not None and seq.grammar.finished(seq.output_ids):
            return FinishReason.STOP
        if len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= self.max_position:
            return FinishReason.LENGTH
        return None
