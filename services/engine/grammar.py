"""Structured output in the engine: a request's grammar matcher (llguidance) and the token masks of a step.

The matcher is rebuilt from the request's tokens wherever a sequence is made (a prefill, a decode resuming from
a pulled first token, a re-prefill, a fork) and catches up with its output lazily, before each mask: the
guarantee survives every path because it depends on the tokens alone, never on state carried between instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import llguidance
import torch

from services.common.errors import EngineInputError
from services.common.tokenizer import BYTE_OFFSET, SPECIALS


class GrammarViolation(RuntimeError):
    """A token the grammar refuses is in a request's output (it was not sampled under the grammar here)."""


@dataclass(slots=True)
class GrammarState:
    matcher: llguidance.LLMatcher
    fed: int = 0  # output tokens consumed so far

    def sync(self, output_ids: list[int]) -> None:
        """Consumes the output tokens the matcher has not seen."""
        for token in output_ids[self.fed :]:
            if not self.matcher.consume_token(token):
                raise GrammarViolation(self.matcher.get_error().splitlines()[0])
            self.fed += 1

    def finished(self, output_ids: list[int]) -> bool:
        """The grammar allows nothing more (its EOS consumed, or a grammar that cannot go on)."""
        self.sync(output_ids)
        return self.matcher.is_stopped()


class _ByteVocab:
    """The byte tokenizer's tokens (services/common/tokenizer.py ByteTokenizer) for llguidance."""

    def __init__(self, eos: int) -> None:
        self.eos_token_id, self.bos_token_id = eos, 1
        self.tokens = [s.encode() for s in SPECIALS] + [bytes([b]) for b in range(256)]
        self.special_token_ids = list(range(BYTE_OFFSET))

    def __call__(self, text: bytes) -> list[int]:
        return [b + BYTE_OFFSET for b in text]


@cache
def tokenizer_for(folder: str, vocab_size: int, eos: tuple[int, ...]) -> llguidance.LLTokenizer:
    """The model's tokenizer as llguidance sees it (built once per model: about a second for a large vocabulary)."""
    path = Path(folder) / "tokenizer.json"
    source = path.read_text() if path.exists() else llguidance.TokenizerWrapper(_ByteVocab(eos[0] if eos else 2))
    return llguidance.LLTokenizer(source, n_vocab=vocab_size, eos_token=list(eos) or None)


def compile_grammar(tokenizer: llguidance.LLTokenizer, grammar: str) -> GrammarState:
    """A fresh matcher of the Lark grammar; EngineInputError naming `grammar` when it does not compile."""
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
    if matcher.is_error():
        raise EngineInputError("grammar", matcher.get_error().splitlines()[0])
    return GrammarState(matcher)


def apply_masks(logits: torch.Tensor, states: list[GrammarState | None], outputs: list[list[int]]) -> torch.Tensor:
    """logits [B, V] → the same with the tokens each row's grammar forbids at -inf (a new tensor when any row has
    a grammar). One bitmask [R, ceil(V/32)] filled by the matchers, unpacked and applied in two tensor ops."""
    rows = [(i, s) for i, s in enumerate(states) if s is not None]
    if not rows:
        return logits
    vocab = logits.shape[-1]
    words = (vocab + 31) // 32
    bits = torch.zeros((len(rows), words), dtype=torch.int32)
    for j, (i, state) in enumerate(rows):
        state.sync(outputs[i])
        state.matcher.unsafe_compute_mask_ptr(bits[j].data_ptr(), words * 4)
    shifts = torch.arange(32, dtype=torch.int32)
    allowed = ((bits.unsqueeze(-1) >> shifts) & 1).view(len(rows), words * 32)[:, :vocab].bool()  # [R, V]
    out = logits.float().clone()
    index = torch.tensor([i for i, _ in rows], device=logits.device)
    out[index] = out[index].masked_fill(~allowed.to(logits.device), float("-inf"))
    return out
