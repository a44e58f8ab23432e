"""A request's output text as the client sees it: incremental detokenization, then stop strings.

Tokens are detokenized one at a time and the text is checked for stop strings after each token, so the result
does not depend on how the tokens were chunked on their way here. Text that may begin a stop string is held
back until it cannot; the stop string itself is never returned. Each token's first character is kept too: the
text is always a prefix of what the tokens decode to, so those offsets are the text's (logprobs' text_offset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.common.tokenizer import IncrementalDecoder, Tokenizer

CONTEXT_IDS = 6  # prompt ids decoded before the output: enough for a word's leading space (SentencePiece)


@dataclass(slots=True)
class TextDelta:
    token_ids: list[int]  # the tokens taken, up to the one that completed a stop string
    text: str
    stopped: bool = False  # a stop string ended the text: the rest of the request is not wanted
    starts: list[int] = field(default_factory=list)  # each token's first character in the whole output text


class OutputText:
    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...] = (), prompt_ids: Sequence[int] = (),
                 skip_special_tokens: bool = True, spaces_between_special_tokens: bool = False) -> None:
        self._decoder = IncrementalDecoder(tokenizer, prompt_ids[-CONTEXT_IDS:], skip_special_tokens,
                                           spaces_between_special_tokens)
        self._stop = tuple(s for s in stop if s)
        self._held = ""  # decoded text not yet returned: it may begin a stop string
        self._decoded = 0  # characters decoded so far (returned, held or cut)
        self.stopped = False

    def push(self, token_ids: list[int], final: bool = False) -> TextDelta:
        """The text `token_ids` add; `final` (the request ended) releases whatever is held."""
        out: list[str] = []
        starts: list[int] = []
        for i, token in enumerate(token_ids):
            starts.append(self._decoded)
            piece = self._decoder.push([token], final=final and i == len(token_ids) - 1)
            self._decoded += len(piece)
            self._held += piece
            cut = self._stop_at()
            if cut is not None:
                out.append(self._held[:cut])
                self._held, self.stopped = "", True
                return TextDelta(token_ids[: i + 1], "".join(out), stopped=True, starts=starts)
            keep = self._may_begin_stop()
            out.append(self._held[: len(self._held) - keep])
            self._held = self._held[len(self._held) - keep :]
        if final:
            out.append(self._held + (self._decoder.push([], final=True) if not token_ids else ""))
            self._held = ""
        return TextDelta(list(token_ids), "".join(out), starts=starts)

    def _stop_at(self) -> int | None:
        """Where the earliest stop string in the held text starts (returned text never holds part of one)."""
        found = [i for i in (self._held.find(s) for s in self._stop) if i >= 0]
        return min(found) if found else None

    def _may_begin_stop(self) -> int:
        """Length of the longest suffix of the held text that is a proper prefix of a stop string."""
        for n in range(min(len(self._held), max((len(s) for s in self._stop), default=1) - 1), 0, -1):
            tail = self._held[-n:]
            if any(s.startswith(tail) for s in self._stop):
                return n
        return 0
