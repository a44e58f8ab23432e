"""`distserve bench --start --workload multi-turn --vary prefix-caching` on the tiny model: a stack with the prefix
cache on and one with it off, each reporting its hit rate and first and follow-up turns apart."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_multi_turn_chat_with_the_cache_on_and_off_reports_hits_and_turns_apart(tiny_llama_dir, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "services", "--log-level", "WARNING", "bench", "--start", "--quick", "--model", tiny_llama_dir,
         "--workload", "multi-turn", "--rate", "2", "--num-requests", "8", "--think-time", "0.1", "--vary", "prefix-caching",
         "--routing", "queue", "--ttft", "2", "--tpot", "0.5", "--num-blocks", "256", "--json", "--no-progress",
         "--no-plots", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    on, off = doc["results"]
    assert [(r["prefix_caching"], r["routing"]) for r in (on, off)] == [("on", "queue"), ("off", "queue")]
    for result in (on, off):
        (point,) = result["points"]
        assert point["requests"] == 8 and point["failed"] == 0
        assert 0 < point["first_turn_ttft"]["p50"] <= point["first_turn_ttft"]["p90"]
        assert 0 < point["followup_ttft"]["p50"] <= point["followup_ttft"]["p90"]
        assert point["tpot"]["p50"] > 0
        low, high = point["attainment_ci"]
        assert 0 <= low <= point["attainment"] <= high <= 1
        assert result["goodput_per_device"] == (1.0 if point["attainment"] >= 0.9 else 0.0)  # 2 req/s on 2 devices
    # follow-ups resend their history: the prefill instance holds the full blocks of every earlier turn's prompt
    # (about half of these prompt tokens; the answers were computed on the decode instance)
    assert 0.3 < on["points"][0]["prefix_hit_rate"] < 1
    assert off["points"][0]["prefix_hit_rate"] == 0  # the setting reached the instances
