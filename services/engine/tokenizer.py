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
    """Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = 0

    def push(self, new_ids: list[int], final: bool = False) -> str:
        """Text added by `new_ids`; on the final push, whatever is left, complete or not."""
        self.ids.extend(new_ids)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd") and not final:
            return ""
        delta, self.emitted = text[self.emitted :], len(text)
        return delta
