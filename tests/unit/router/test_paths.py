"""The path of a disaggregated request whose prompt a decode instance partly holds, by predicted TTFT."""

from __future__ import annotations

from services.common.step_model import PrefillCoeffs
from services.router.admission import Candidate
from services.router.paths import PathLimits, choose_path, pick_decode

LINE = PrefillCoeffs(c0=0.01, per_token=1e-3, per_sq=1e-7)
LIMITS = PathLimits(local_prefill_tokens=64, reverse_pull_tokens=32)
PREFILL = Candidate("p", "prefill@cpu:0", 0.0)
DECODE = Candidate("d", "decode@cpu:1", 0.0)


def test_nothing_held_on_decode_is_a_plain_pull() -> None:
    assert choose_path(500, PREFILL, 0, DECODE, 0, 0, LINE, 512, LIMITS).path == "pull"
    assert choose_path(500, PREFILL, 0, None, 0, 0, LINE, 512, LIMITS).path == "pull"


def test_a_short_new_suffix_is_prefilled_on_the_decode_instance() -> None:
    route = choose_path(500, PREFILL, 0, DECODE, 480, 480, LINE, 512, LIMITS)
    assert (route.path, route.decode_id, route.decode_cached) == ("local", "d", 480)


def test_a_long_new_suffix_after_a_held_prefix_is_pulled_to_the_prefill_first() -> None:
    assert choose_path(900, PREFILL, 0, DECODE, 600, 600, LINE, 512, LIMITS).path == "reverse"
    assert choose_path(900, PREFILL, 0, DECODE, 600, 600, LINE, 512, PathLimits(64, 0)).path == "delta"


def test_the_prefill_holding_as_much_as_the_decode_is_a_delta_pull() -> None:
    assert choose_path(900, PREFILL, 592, DECODE, 600, 600, LINE, 512, LIMITS).path == "delta"


def test_without_a_fitted_line_tokens_decide() -> None:
    queued = Candidate("p", "prefill@cpu:0", 1000.0)
    assert choose_path(900, queued, 0, DECODE, 600, 600, None, 512, LIMITS).path == "reverse"
    assert choose_path(640, queued, 0, DECODE, 600, 600, None, 512, LIMITS).path == "local"


def test_the_decode_holding_the_prompt_wins_unless_loaded_a_request_more() -> None:
    a, b = Candidate("a", "decode@cpu:1", 100.0), Candidate("b", "decode@cpu:1", 400.0)
    assert pick_decode([a, b], {"b": 256}, 400).id == "b"
    assert pick_decode([a, b], {"b": 256}, 200).id == "a"
    assert pick_decode([a, b], {}, 400).id == "a"
    assert pick_decode([], {}, 400) is None


def test_a_prompt_filling_its_last_block_is_held_whole_for_a_delta_but_lent_without_its_last_block() -> None:
    # 512 tokens, 32 blocks of 16 held: a delta keeps all 32; a prefill must compute the last token's block
    route = choose_path(512, PREFILL, 0, DECODE, 512, 496, LINE, 512, PathLimits(0, 0))
    assert (route.path, route.decode_cached) == ("delta", 512)


def test_a_reverse_pull_pays_its_lease_call_and_the_pull_of_what_the_prefill_lacks() -> None:
    assert choose_path(900, PREFILL, 0, DECODE, 600, 600, LINE, 512, LIMITS).path == "reverse"
    slow_link = PathLimits(64, 32, lease_rpc_s=0.002, pull_bytes_per_s=1e6)
    # 600 tokens at 1 ms each: dearer than computing them (about 0.6 s plus the quadratic term saved)
    assert choose_path(900, PREFILL, 0, DECODE, 600, 600, LINE, 512, slow_link, pull_s_per_token=2e-3).path == "delta"
