"""Recording a profile: time prefills and decode steps over a grid of batch shapes, keep the median of repeats.

The timing callables come from the engine (`distserve profile` wires them); this module only chooses the
shapes and writes the points in the profile file format of `services.common.step_model.profile_fit`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile
from services.common.step_model.shape import ModelShape

Timer = Callable[[list[int]], float]  # batch of lengths → seconds


def prefill_grid(max_context: int, max_tokens: int) -> list[list[int]]:
    """Batches of equal prompt lengths 16, 32, ... and 1, 2, 4 requests, up to `max_tokens` in all, plus
    mixed-length batches so the squared-length term is not collinear with the token count."""
    lengths = [n for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n < max_context]
    grid = [[n] * b for n in lengths for b in (1, 2, 4) if n * b <= max_tokens]
    grid += [[n, max(n // 8, 1)] for n in lengths if n + n // 8 <= max_tokens]
    return grid


def decode_grid(max_context: int, max_tokens: int) -> list[list[int]]:
    """Batches of 1 to 64 requests at context lengths 16 to 2048, up to `max_tokens` context tokens."""
    contexts = [c for c in (16, 64, 256, 1024, 2048) if c < max_context]
    return [[c] * b for c in contexts for b in (1, 2, 4, 8, 16, 32, 64) if c * b <= max_tokens]


def record_profile(shape: ModelShape, device: str, time_prefill: Timer, time_decode: Timer, tp: int = 1,
                   max_tokens: int = 4096, repeats: int = 3, pp: int = 1, best_of: int = 1) -> ProfileFile:
    """Measure every grid shape `repeats` times (after one warm-up) and keep the medians; each repeat the best of
    `best_of` runs (on a host shared with other work, its bursts left out)."""

    def median(timer: Timer, batch: list[int]) -> float:
        timer(batch)
        return statistics.median(min(timer(batch) for _ in range(best_of)) for _ in range(repeats))

    return ProfileFile(
        model=shape.as_dict(), device=device, tp=tp, pp=pp,
        prefill=[PrefillPoint(prompt_lens=b, seconds=median(time_prefill, b))
                 for b in prefill_grid(shape.max_context, max_tokens)],
        decode=[DecodePoint(context_lens=b, seconds=median(time_decode, b))
                for b in decode_grid(shape.max_context, max_tokens)],
    )
