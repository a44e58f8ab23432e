"""The prefill pick by predicted TTFT: the queue there plus the prefill of the suffix it has not cached."""

from __future__ import annotations

from services.common.step_model import PrefillCoeffs
from services.common.step_model.stored import FittedModel
from services.router.admission import Candidate
from services.router.prefix_routing import pick_prefill, shareable

LINE = PrefillCoeffs(c0=0.01, per_token=1e-3, per_sq=1e-6)
MODEL = FittedModel({"prefill@cpu:0": LINE, "prefill@cpu:1": LINE}, {})


def _two(load_a: float, load_b: float) -> list[Candidate]:
    return [Candidate("a", "prefill@cpu:0", load_a), Candidate("b", "prefill@cpu:1", load_b)]


def test_a_longer_queue_wins_when_it_holds_enough_of_the_prompt() -> None:
    pick = pick_prefill(_two(0, 300), {"b": 768}, 800, 512, MODEL)
    assert (pick.instance_id, pick.cached_tokens) == ("b", 768)


def test_where_the_holder_does_not_win_the_load_book_picks_atomically() -> None:
    """No instance is preferred unless it holds more of the prompt than another: the book's pick does not herd."""
    assert pick_prefill(_two(0, 300), {"b": 64}, 800, 512, MODEL).instance_id == ""
    assert pick_prefill(_two(0, 0), {}, 800, 512, MODEL).instance_id == ""


def test_without_a_fitted_line_for_each_it_counts_tokens() -> None:
    partial = FittedModel({"prefill@cpu:0": LINE}, {})
    assert pick_prefill(_two(100, 150), {"b": 64}, 200, 512, partial).instance_id == "b"  # 150 + 136 < 100 + 200
    assert pick_prefill(_two(100, 150), {}, 200, 512, None).instance_id == ""
    assert pick_prefill([], {}, 200, 512, None) is None


def test_a_prefill_skips_no_cached_block_holding_the_last_prompt_token() -> None:
    assert shareable(32, 32, 16) == 16  # two full blocks of 16: the second holds the last token, always computed
    assert shareable(32, 33, 16) == 32
    assert shareable(16, 100, 16) == 16
