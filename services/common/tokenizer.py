"""Tokenizers: tokenizer.json through `tokenizers` when the model folder has one, bytes otherwise.

The byte fallback's ids: 0 <unk>, 1 <s>, 2 </s>, then the 256 bytes. A tokenizer.json gets the added and special
tokens of tokenizer_config.json as transformers gives them to it.
"""

from __future__ import annotations

import json
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

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True,
               spaces_between_special_tokens: bool = False) -> str:
        """Text of the ids; kept special tokens with a space each side when `spaces_between_special_tokens`
        (vLLM's option, as transformers' slow tokenizers join added tokens)."""

    def token_text(self, token_id: int) -> str:
        """One token on its own, as logprobs name it: special tokens by name, a word's leading space kept."""


class ByteTokenizer:
    """One token per UTF-8 byte, after a BOS token."""

    bos_token_id = 1

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.bos_token_id] * add_special_tokens + [b + BYTE_OFFSET for b in text.encode()]

    def encode_with_starts(self, text: str) -> tuple[list[int], list[int]]:
        return self.encode(text), [0, *(i for i, ch in enumerate(text) for _ in ch.encode())]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True,
               spaces_between_special_tokens: bool = False) -> str:
        parts: list[str] = []
        run = bytearray()
        for i in ids:
            if BYTE_OFFSET <= i < BYTE_OFFSET + 256:
                run.append(i - BYTE_OFFSET)
            elif not skip_special_tokens and 0 <= i < BYTE_OFFSET:
                parts += [run.decode(errors="replace"), SPECIALS[i]]
                run.clear()
        parts.append(run.decode(errors="replace"))
        return (" " if spaces_between_special_tokens else "").join(p for p in parts if p)

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id], skip_special_tokens=False)


class HFTokenizer:
    """A `tokenizers` tokenizer.json (post-processor adds BOS where the model wants it), with the added and
    special tokens of tokenizer_config.json (`config`) registered as transformers registers them."""

    def __init__(self, path: Path, config: dict | None = None) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self._tok = RustTokenizer.from_file(str(path))
        config = config or {}
        _register_config_tokens(self._tok, config)
        self._added = set(self._tok.get_added_tokens_decoder())
        bos = _content(config.get("bos_token"))
        self.bos_token_id = self._tok.token_to_id(bos or "<s>")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_with_starts(self, text: str) -> tuple[list[int], list[int]]:
        enc = self._tok.encode(text)
        starts, end = [], 0
        for (start, stop), special in zip(enc.offsets, enc.special_tokens_mask):
            starts.append(end if special else start)  # an added special's offsets are (0, 0) wherever it sits
            end = max(end, stop)
        return enc.ids, starts

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True,
               spaces_between_special_tokens: bool = False) -> str:
        if skip_special_tokens or not spaces_between_special_tokens:
            return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        parts: list[str] = []
        run: list[int] = []
        for i in ids:  # runs of ordinary tokens decoded together, each added token alone
            if i in self._added:
                parts += [self._tok.decode(run), self._tok.decode([i], skip_special_tokens=False)]
                run = []
            else:
                run.append(i)
        parts.append(self._tok.decode(run))
        return " ".join(p for p in parts if p)

    def token_text(self, token_id: int) -> str:
        text = self._tok.decode([token_id], skip_special_tokens=False)
        piece = self._tok.id_to_token(token_id) or ""
        # A SentencePiece decoder drops the space of a word that starts the text; alone, every word does.
        return " " + text if piece.startswith(SPIECE_SPACE) and not text.startswith(" ") else text


def _content(token: object) -> str | None:
    """A token as tokenizer_config.json writes it: a string, or an AddedToken's fields."""
    return token.get("content") if isinstance(token, dict) else token if isinstance(token, str) else None


def _register_config_tokens(tok, config: dict) -> None:
    """tokenizer_config.json's `added_tokens_decoder` (with their flags), named special tokens and extra special
    tokens, added where tokenizer.json lacks them or holds them as ordinary tokens (a token in the vocab keeps
    its id)."""
    from tokenizers import AddedToken

    known = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    added = [AddedToken(e["content"], single_word=e.get("single_word", False), lstrip=e.get("lstrip", False),
                        rstrip=e.get("rstrip", False), normalized=e.get("normalized", False), special=e.get("special", False))
             for e in (config.get("added_tokens_decoder") or {}).values()]
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    named = [config.get(k) for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                     "mask_token")]
    listed = {c for c in (*map(_content, named), *map(_content, extra.values() if isinstance(extra, dict) else extra)) if c}
    added += [AddedToken(c, special=True, normalized=False) for c in sorted(listed - {t.content for t in added})]
    missing = [t for t in added if t.content not in known or (t.special and not known[t.content].special)]
    tok.add_special_tokens([t for t in missing if t.special])
    tok.add_tokens([t for t in missing if not t.special])


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """The folder's tokenizer.json (with tokenizer_config.json); bytes where it has no tokenizer at all. A folder
    with only a SentencePiece tokenizer.model is refused, naming the file to make."""
    folder = Path(folder)
    path, config = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if path.exists():
        return HFTokenizer(path, json.loads(config.read_text()) if config.exists() else {})
    if (folder / "tokenizer.model").exists():
        raise FileNotFoundError(
            f"{folder} has tokenizer.model but no tokenizer.json, which distserve reads: write it with transformers "
            f"(AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR), sentencepiece installed)")
    return ByteTokenizer()


class IncrementalDecoder:
    """Turns a growing list of ids into text deltas, holding back incomplete UTF-8 sequences.

    Each push decodes only the ids since the last emitted text (plus the window before it, for context),
    so streaming a long output costs linear, not quadratic, time. `context`: ids before the output (the
    prompt's last few), decoded with it and never emitted, so that the first word keeps its leading space.
    """

    def __init__(self, tokenizer: Tokenizer, context: Sequence[int] = (), skip_special_tokens: bool = True,
                 spaces_between_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.options = {"skip_special_tokens": skip_special_tokens,
                        "spaces_between_special_tokens": spaces_between_special_tokens}
        self.ids: list[int] = list(context)
        self.prefix = 0  # start of the window decoded for context
        self.read = len(self.ids)  # ids up to here have had their text emitted

    def push(self, new_ids: list[int], final: bool = False) -> str:
        """Text added by `new_ids`; on the final push, whatever is left, complete or not."""
        self.ids.extend(new_ids)
        seen = self.tokenizer.decode(self.ids[self.prefix : self.read], **self.options)
        text = self.tokenizer.decode(self.ids[self.prefix :], **self.options)
        if len(text) <= len(seen) or (text.endswith("\ufffd") and not final):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(seen) :]
