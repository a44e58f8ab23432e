"""Points summarise what the client saw; the document derives ratios, simulator errors and transfer shares."""

import io
import json

import pytest
from rich.console import Console

from services.bench.loadgen import RequestResult
from services.bench.report import document, print_tables
from services.bench.results import ModeResult, summarize
from services.bench.slo import ScaledSLO
from services.common.slo import SLO


def _result(i: int, ttft: float, tpot: float, tokens: int = 11, transfer: float | None = None) -> RequestResult:
    stages = {"prefill_queue": 0.0, "prefill": ttft, "decode": tpot * (tokens - 1)}
    if transfer is not None:
        stages["transfer"] = transfer
    return RequestResult(f"r{i}", 8, tokens, sent=100.0, first=100.0 + ttft, second=100.0 + ttft + tpot,
                         last=100.0 + ttft + tpot * (tokens - 1), stages=stages)


def test_a_point_counts_attainment_failures_and_the_transfer_share():
    results = [_result(0, 0.1, 0.01, transfer=0.002), _result(1, 0.1, 0.05, transfer=0.002),
               RequestResult("r2", 8, error="UNAVAILABLE: gone")]
    point = summarize(2.0, results, ScaledSLO(SLO(0.2, 0.02)), wall_s=3.0)
    assert point.attainment == pytest.approx(1 / 3)
    assert point.attainment_se == pytest.approx((1 / 3 * 2 / 3 / 3) ** 0.5)  # binomial, over all 3 requests
    assert point.tpot_attainment == pytest.approx(1 / 3) and point.ttft_attainment == pytest.approx(2 / 3)
    assert point.failed == 1 and point.requests == 3
    assert point.transfer_share == pytest.approx(0.002 / ((0.2 + 0.6) / 2))
    assert point.tightest_slo_scale == float("inf")
    assert point.first_gap["mean"] == pytest.approx(0.03)  # the completed requests' first → second token


def _mode(mode: str, goodput: float, sim: float | None = None) -> ModeResult:
    slo = ScaledSLO(SLO(0.2, 0.02))
    point = summarize(goodput, [_result(0, 0.1, 0.01, transfer=0.001 if mode == "disagg" else None)], slo, 1.0)
    point.simulated_attainment = sim
    return ModeResult(mode, "chatbot", 2, slo.as_dict(), goodput, goodput / 2, [point], {})


def test_the_document_is_json_with_ratios_errors_and_shares():
    doc = document([_mode("disagg", 4.0, sim=0.95), _mode("colocated", 1.0), _mode("chunked", 0.0)], {}, 1.0)
    json.dumps(doc, allow_nan=False)
    assert doc["ratios"] == {"chatbot": {"disagg/colocated": 4.0, "disagg/chunked": None}}
    assert [e["error_points"] for e in doc["simulator_error"]] == [pytest.approx(-5.0)]
    assert doc["simulator_error"][0]["measured_se_points"] == 0.0  # one request, met: no spread
    assert doc["transfer_share"][0]["mode"] == "disagg" and doc["transfer_share"][0]["at_goodput"]
    assert {"mode", "workload", "devices", "goodput_per_device", "points"} <= set(doc["results"][0])


def test_the_fitted_prediction_is_judged_against_the_95_percent_interval_up_to_the_knee():
    slo = ScaledSLO(SLO(0.2, 0.02))
    hits = [_result(i, 0.1, 0.01) for i in range(180)] + [_result(i, 0.5, 0.01) for i in range(20)]
    low, high = summarize(2.0, hits, slo, 1.0), summarize(4.0, hits[:100], slo, 1.0)
    assert low.attainment_ci == pytest.approx((0.8506, 0.9343), abs=1e-4)  # Wilson, 180 of 200
    low.fitted_attainment, high.fitted_attainment = 0.92, 0.9  # high: all 100 met, [0.963, 1]
    low.simulated_attainment = high.simulated_attainment = 0.5
    doc = document([ModeResult("disagg", "chatbot", 2, slo.as_dict(), 2.0, 1.0, [low, high], {})], {}, 1.0)
    assert [(e["up_to_knee"], e["fitted_within_ci"]) for e in doc["simulator_error"]] == [(True, True), (False, False)]


def test_overload_ratios_set_admission_on_against_off():
    slo, row = ScaledSLO(SLO(0.2, 0.02)), {"rate": 9.0, "requests": 10, "attainment": 0.5, "live": {}}
    result = ModeResult("disagg", "chatbot", 2, slo.as_dict(), 4.5, 2.25, [], {}, overload=[
        {**row, "multiple": 2.0, "admission": False, "goodput_per_device": 1.0, "share_refused": 0.0,
         "admitted_attainment": 0.2},
        {**row, "multiple": 2.0, "admission": True, "goodput_per_device": 1.5, "share_refused": 0.4,
         "admitted_attainment": 0.95}])
    (ratio,) = document([result], {}, 1.0)["overload_ratios"]
    assert ratio["ratio"] == 1.5 and ratio["admitted_attainment_on"] == 0.95 and ratio["share_refused_on"] == 0.4
    console = Console(file=io.StringIO(), width=200)
    print_tables([result], console)
    assert "with admission / without = 1.50x; refused 40%, admitted attainment 95%" in console.file.getvalue()


def test_the_fitted_knee_the_rates_were_chosen_around_is_printed():
    slo = ScaledSLO(SLO(2.0, 0.05))
    for knee, words in ((0.6, "fitted simulator's knee, 0.6 req/s"), (0.0, "around the start rate")):
        console = Console(record=True, width=200)
        print_tables([ModeResult("disagg", "chatbot", 2, slo.as_dict(), 0.0, 0.0, [], {}, fitted_knee=knee)], console)
        assert words in console.export_text()


def test_a_point_reports_the_cache_hit_rate_and_first_and_follow_up_turns_apart():
    results = [_result(0, 0.4, 0.01), _result(1, 0.1, 0.01), _result(2, 0.2, 0.01), RequestResult("r3", 8, error="x")]
    results[1].turn, results[1].cached_tokens = 1, 6
    results[2].turn, results[2].cached_tokens = 2, 2
    results[3].turn, results[3].cached_tokens = 3, 8  # failed: left out of the hit rate
    point = summarize(1.0, results, ScaledSLO(SLO(0.3, 0.02)), 1.0)
    assert point.prefix_hit_rate == pytest.approx(8 / 24)
    assert point.first_turn_ttft["p50"] == pytest.approx(0.4)
    assert point.followup_ttft["p50"] == pytest.approx(0.15) and point.followup_ttft["p90"] == pytest.approx(0.19)


def test_runs_that_differ_in_settings_are_named_and_compared_alike():
    results = [_mode("disagg", 4.0), _mode("colocated", 2.0), _mode("disagg", 2.0), _mode("colocated", 2.0)]
    results[2].prefix_caching = results[3].prefix_caching = "off"
    doc = document(results, {}, 1.0)
    assert doc["ratios"] == {"chatbot cache on route model": {"disagg/colocated": 2.0},
                             "chatbot cache off route model": {"disagg/colocated": 1.0}}
    assert doc["results"][2]["prefix_caching"] == "off" and doc["results"][0]["routing"] == "model"
    assert {"prefix_hit_rate", "first_turn_ttft", "followup_ttft"} <= set(doc["results"][0]["points"][0])
    console = Console(record=True, width=250)
    print_tables(results, console)
    text = console.export_text()
    assert "prefix cache and turns per run" in text and "disagg cache off route model" in text
