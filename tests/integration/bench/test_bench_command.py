"""`distserve bench --start` on the tiny model: every mode compared, JSON of the documented shape, points that
agree with the goodput they report, and the plots."""

import json
import subprocess
import sys

import pytest

from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile, write_profile
from services.planner.shapes import load_shape

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]


def _profile(model_dir: str, path) -> str:
    """A profile of plausible CPU timings (recording a real one is `distserve profile`'s own test)."""
    write_profile(ProfileFile(
        model=load_shape(model_dir).as_dict(), device="cpu:0",
        prefill=[PrefillPoint(prompt_lens=[n] * b, seconds=1e-3 + 2e-5 * n * b) for n in (16, 64, 256) for b in (1, 2)],
        decode=[DecodePoint(context_lens=[c] * b, seconds=1e-3 + 1e-7 * c * b + 1e-4 * b) for c in (16, 256) for b in (1, 4)],
    ), path)
    return str(path)


def test_quick_comparison_reports_consistent_points(tiny_llama_dir, tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "services", "--log-level", "WARNING", "bench", "--start", "--quick", "--model", tiny_llama_dir,
         "--compare", "disagg,colocated,chunked", "--num-requests", "6", "--start-rate", "4", "--factor", "2",
         "--bisect-steps", "1", "--max-steps", "1", "--ttft", "2", "--tpot", "0.5", "--simulate", "--profile", _profile(tiny_llama_dir, tmp_path / "p.json"),
         "--num-blocks", "128", "--max-batch-tokens", "128", "--json", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert json.loads((out / "results.json").read_text()) == doc
    assert [(r["mode"], r["workload"]) for r in doc["results"]] == [("disagg", "chatbot"), ("colocated", "chatbot"), ("chunked", "chatbot")]
    for result in doc["results"]:
        points = result["points"]
        assert result["devices"] == 2 and points
        assert [p["rate"] for p in points] == sorted(p["rate"] for p in points)
        assert all(0.0 <= p["attainment"] <= min(p["ttft_attainment"], p["tpot_attainment"]) <= 1.0 for p in points)
        assert all(p["requests"] == 6 and p["failed"] == 0 for p in points)
        assert all(0.0 < p["first_gap"]["p50"] <= p["first_gap"]["p90"] for p in points)  # outputs of 2+ tokens
        passing = [p["rate"] for p in points if p["attainment"] >= 0.9]
        assert result["goodput"] in passing or (result["goodput"] == 0.0 and not passing)
        assert result["goodput_per_device"] == result["goodput"] / 2
        disagg = result["mode"] == "disagg"
        assert all(p["simulated_attainment"] is not None and p["fitted_attainment"] is not None for p in points)
        fit = result["calibration"]["served_fit"]
        assert fit["decode_per_req"] >= 0
        overheads = result["calibration"]["overheads"]
        assert set(overheads) == {"to_prefill", "first_token", "to_decode", "reserve", "admit", "token", "join"}
        assert overheads["join"] == fit["join_s"] >= 0 and all(p["runs"] == 1 for p in points)  # --repeats 1 by default
        if disagg:  # fitted to the steps the decode instance served during the calibration load
            assert fit["decode_steps"] > 0
        else:  # no hand-off on a colocated path; a few tiny requests may show one decode batch size only, and
            # a fit from one size keeps the profiled decode terms (decode_steps 0)
            assert overheads["to_decode"] == overheads["reserve"] == overheads["admit"] == overheads["join"] == 0.0
        assert all(set(p["stages"]) >= ({"prefill", "transfer", "decode"} if disagg else {"prefill", "decode"}) for p in points)
        # the prefill steps kept (those the fit took, where it fitted them)
        assert len(result["calibration"]["prefill_steps"]) >= fit["prefill_steps"]
        assert all(len(p["prefill_steps"]) >= p["served_fit"]["prefill_steps"] for p in points)
        if disagg:  # prefill steps only
            assert len(result["calibration"]["prefill_steps"]) == fit["prefill_steps"] > 0
    assert set(doc["ratios"]["chatbot"]) == {"disagg/colocated", "disagg/chunked"}
    assert len(doc["simulator_error"]) == sum(len(r["points"]) for r in doc["results"])
    for name in ("chatbot-attainment.png", "chatbot-breakdown.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overload_runs_admission_off_and_on_past_the_knee(tiny_llama_dir, tmp_path):
    # an SLO no instance can meet: with admission on, the router refuses what its fitted model predicts to miss
    run = subprocess.run(
        [sys.executable, "-m", "services", "--log-level", "WARNING", "bench", "--start", "--quick", "--model", tiny_llama_dir,
         "--num-requests", "8", "--rate", "4", "--ttft", "0.000001", "--tpot", "0.5", "--overload", "2",
         "--num-blocks", "128", "--max-batch-tokens", "128", "--json", "--no-progress", "--no-plots", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = json.loads(run.stdout)["results"]
    off, on = result["overload"]
    assert (off["admission"], on["admission"]) == (False, True) and off["rate"] == on["rate"] == 8.0
    assert off["refused"] == 0 and off["requests"] == on["requests"] == 8
    assert on["refused"] > 0 and on["share_refused"] == on["refused"] / 8
    assert on["goodput"] == on["rate"] * on["attainment"] and on["goodput_per_device"] == on["goodput"] / 2
    # the router predicted every admitted request: its live error metrics over the run, as the bench read them
    assert off["live"]["ttft_error_s"]["count"] == 8 and off["live"]["ttft_error_s"]["p50"] is not None
    assert off["live"]["attainment"]["ttft/measured"] == 0.0  # nothing meets a microsecond
    assert all(len(p["live"]) == p["runs"] for p in result["points"])
    (ratio,) = json.loads(run.stdout)["overload_ratios"]
    assert ratio["multiple"] == 2.0 and ratio["share_refused_on"] == on["share_refused"]
