"""`distserve profile` times the real engine and writes a profile the planner plans with."""

import subprocess
import sys

from services.common.step_model.profile_fit import read_profile
from services.planner.hardware import load_latency_model
from services.planner.shapes import load_shape


def test_profile_of_the_tiny_model_feeds_the_planner(tiny_llama_dir, tmp_path):
    out = tmp_path / "cpu.json"
    run = subprocess.run([sys.executable, "-m", "services", "profile", "--model", tiny_llama_dir, "--device", "cpu:0",
                          "--out", str(out), "--max-tokens", "1024", "--repeats", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Lm =" in run.stdout
    profile = read_profile(out)
    assert profile.device == "cpu:0" and profile.model["hidden"] == 64
    assert len(profile.prefill) >= 10 and len(profile.decode) >= 10
    assert all(p.seconds > 0 for p in profile.prefill + profile.decode)
    model = load_latency_model(str(out), load_shape(tiny_llama_dir))
    assert model.at(1).prefill_time(1024, 4 * 256**2) > model.at(1).prefill_time(16, 256) > 0
