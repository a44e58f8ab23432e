"""Tokenizers: tokenizer.json through `tokenizers` when the model folder has one, bytes otherwise.

Both share one id scheme for the byte fallback: 0 <unk>, 1 <s>, 2 </s>, then the 256 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

SPECIALS = ("<unk>", "<s>", "</s>")
BYTE_OFFSET = len(SPECIALS)
SPIECE_SPACE = "\u2581"  # SentencePiece's word-start marker


class Tokenizer(Protocol):
    @property
    def bos_token_id(self) -> int | None:
        """The BOS token, or None where the model has none."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of the text, with the BOS token when the model uses one (and `add_special_tokens`)."""

    def encode_with_starts(self, text: str) -> tuple[list[int], list[int]]:
        """`encode(text)` and where each token's first character is in `text` (an added special: where it sits)."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of the ids."""

    def token_text(self, token_id: int) -> str:
        """One token on its own, as logprobs name it: special tokens by name, a word's leading space kept."""


class ByteTokenizer:
    """One token per UTF-8 byte, after a BOS token."""

    bos_token_id = 1

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.bos_token_id] * add_special_tokens + [b + BYTE_OFFSET for b in text.encode()]

    def encode_with_starts(self, text: str) -> tuple[list[int], list[int]]:
        return self.encode(text), [0, *(i for i, ch in enumerate(text) for _ in ch.encode())]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        parts: list[str] = []
        run = bytearray()
        for i in ids:
            if BYTE_OFFSET <= i < BYTE_OFFSET + 256:
                run.append(i - BYTE_OFFSET)
            elif not skip_special_tokens and 0 <= i < BYTE_OFFSET:
                parts += [run.decode(errors="replace"), SPECIALS[i]]
                run.clear()
        return "".join(parts) + run.decode(errors="replace")

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id], skip_special_tokens=False)


class HFTokenizer:
    """A `tokenizers` tokenizer.json (post-processor adds BOS where the model wants it)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self._tok = RustTokenizer.from_file(str(path))
        self.bos_token_id = self._tok.token_to_id("<s>")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_with_starts(self, text: str) -> tuple[list[int], list[int]]:
        enc = self._tok.encode(text)
        starts, end = [], 0
        for (start, stop), special in zip(enc.offsets, enc.special_tokens_mask):
            starts.append(end if special else start)  # an added special's offsets are (0, 0) wherever it sits
            end = max(end, stop)
        return enc.ids, starts

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        text = self._tok.decode([token_id], skip_special_tokens=False)
        piece = self._tok.id_to_token(token_id) or ""
        # A SentencePiece decoder drops the space of a word that starts the text; alone, every word does.
        return " " + text if piece.startswith(SPIECE_SPACE) and not text.startswith(" ") else text


def load_tokenizer(folder: str | Path) -> Tokenizer:
    path = Path(folder) / "tokenizer.json"
    return HFTokenizer(path) if path.exists() else ByteTokenizer()


class IncrementalDecoder:
    """Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences.

    Each push decodes only the ids since the last emitted text (plus the window before it, for context),
    so streaming a long output costs linear, not quadratic, time. `context`: ids before the output (the
    prompt's last few), decoded with it and never emitted, so that the first word keeps its leading space.
    """

    def __init__(self, tokenizer: Tokenizer, context: Sequence[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = list(context)
        self.prefix = 0  # start of the window decoded for context
        self.read = len(self.ids)  # ids up to here have had their text emitted

    def push(self, new_ids: list[int], final: bool = False) -> str:
        """Text added by `new_ids`; on the final push, whatever is left, complete or not."""
        self.ids.extend(new_ids)
        seen = self.tokenizer.decode(self.ids[self.prefix : self.read])
        text = self.tokenizer.decode(self.ids[self.prefix :])
        if len(text) <= len(seen) or (text.endswith("\ufffd") and not final):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(seen) :]
