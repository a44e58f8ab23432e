"""What a step's attention reads, averaged over the layers, where some layers attend to a sliding window only
(Mistral, Gemma 2/3): the latency model's attention terms, per layer group.

The lines' attention terms count tokens of every layer: a decode step's `per_ctx · t` (t context tokens) and a
prefill's `per_sq · t2` (t2 = Σ `prompt_sq`). A sliding layer reads at most its last `window` keys per query, so in
those units a sequence of L tokens attends to `full · L + sliding · min(L, window)` at a decode step, and a prompt's
t2 is the same mix of the full and the windowed squares. For a model without sliding layers both are the plain terms.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.step_model import prompt_sq


@dataclass(frozen=True, slots=True)
class Attended:
    sliding: float = 0.0  # the share of layers that attend to a sliding window
    window: int = 0  # their window in positions (0: no sliding layer)

    @classmethod
    def of(cls, layers: int, sliding: int, window: int) -> Attended:
        """A model of `layers` layers, `sliding` of them attending to their last `window` positions."""
        return cls(sliding / layers, window) if sliding and window else cls()

    def context(self, tokens: int) -> float:
        """A decode step's attention over a sequence of `tokens` tokens, in context tokens of every layer."""
        if not self.window or tokens <= self.window:
            return tokens
        return tokens - self.sliding * (tokens - self.window)

    def prompt_sq(self, new: int, cached: int) -> float:
        """The t2 of `new` prompt tokens computed after `cached` ones (`prompt_sq`), a sliding layer's query
        attending to its last `window` positions: the windowed square W(x) = x² up to the window, then
        w² + 2w(x − w), taken as W(cached + new) − W(cached)."""
        full = prompt_sq(new, cached)
        if not self.window or cached + new <= self.window:
            return full
        return full - self.sliding * (full - (self._windowed(cached + new) - self._windowed(cached)))

    def _windowed(self, x: int) -> int:
        w = self.window
        return x * x if x <= w else w * (2 * x - w)


FULL = Attended()  # every layer attends to every position
