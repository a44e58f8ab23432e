"""Tokenizers: tokenizer.json through `tokenizers` when the model folder has one, bytes otherwise.

Both share one id scheme for the byte fallback: 0 <unk>, 1 <s>, 2 </s>, then the 256 bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

SPECIALS = ("<unk>", "<s>", "</s>")
BYTE_OFFSET = len(SPECIALS)


class Tokenizer(Protocol):
    bos_token_id: int | None

    def encode(self, text: str) -> list[int]:
        """Token ids of the text, with the BOS token when the model uses one."""

    def decode(self, ids: list[int]) -> str:
        """Text of the ids, special tokens skipped."""


class ByteTokenizer:
    """One token per UTF-8 byte, after a BOS token."""

    bos_token_id = 1

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id, *(b + BYTE_OFFSET for b in text.encode())]

    def decode(self, ids: list[int]) -> str:
        data = bytes(i - BYTE_OFFSET for i in ids if BYTE_OFFSET <= i < BYTE_OFFSET + 256)
        return data.decode(errors="replace")


class HFTokenizer:
    """A `tokenizers` tokenizer.json (post-processor adds BOS where the model wants it)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self._tok = RustTokenizer.from_file(str(path))
        self.bos_token_id = self._tok.token_to_id("<s>")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)


def load_tokenizer(folder: str | Path) -> Tokenizer:
    path = Path(folder) / "tokenizer.json"
    return HFTokenizer(path) if path.exists() else ByteTokenizer()


class IncrementalDecoder:
    """Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences.

    Each push decodes only the ids since the last emitted text (plus the window before it, for context),
    so streaming a long output costs linear, not quadratic, time.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # start of the window decoded for context
        self.read = 0    # ids up to here have had their text emitted

    def push(self, new_ids: list[int], final: bool = False) -> str:
        """Text added by `new_ids`; on the final push, whatever is left, complete or not."""
        self.ids.extend(new_ids)
        seen = self.tokenizer.decode(self.ids[self.prefix : self.read])
        text = self.tokenizer.decode(self.ids[self.prefix :])
        if len(text) <= len(seen) or (text.endswith("\ufffd") and not final):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(seen) :]
