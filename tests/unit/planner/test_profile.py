"""Fitting the latency model to profiled points recovers the device's coefficients."""

import numpy as np
import pytest

from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile, appendix_a_constants, fit_profile, write_profile
from services.planner.hardware import load_latency_model
from services.planner.shapes import PRESETS


def _profile(noise: float = 0.0, seed: int = 0) -> ProfileFile:
    """Points from known coefficients: prefill 5 ms + 0.02 ms/token + 1e-5 ms/token²,
    decode 3 ms + 0.001 ms/context token + 0.05 ms/request."""
    rng = np.random.default_rng(seed)
    jitter = lambda: 1 + noise * rng.standard_normal()
    prefill = [PrefillPoint(prompt_lens=[n] * b, seconds=(5 + 0.02 * n * b + 1e-5 * n * n * b) * jitter() / 1e3)
               for n in (16, 64, 128, 256, 512) for b in (1, 2, 4)]
    decode = [DecodePoint(context_lens=[n] * b, seconds=(3 + 0.001 * n * b + 0.05 * b) * jitter() / 1e3)
              for n in (32, 128, 512) for b in (1, 4, 16, 32)]
    return ProfileFile(model=PRESETS["small-llama"].as_dict(), device="cpu:0", prefill=prefill, decode=decode)


def test_fit_recovers_the_coefficients_from_noisy_points():
    c = fit_profile(_profile(noise=0.02)).at(1)
    assert c.prefill.per_token == pytest.approx(0.02e-3, rel=0.05)
    assert c.prefill.c0 == pytest.approx(5e-3, rel=0.1)
    assert c.decode_small.per_ctx == pytest.approx(0.001e-3, rel=0.1)
    assert c.decode_small.c0 == pytest.approx(3e-3, rel=0.1)
    assert c.prefill_time(300, 300**2) == pytest.approx((5 + 6 + 0.9) / 1e3, rel=0.03)


def test_fit_never_returns_negative_coefficients():
    prof = _profile()
    for p in prof.prefill:
        p.seconds = 0.001 * sum(p.prompt_lens) ** 0.5  # concave: a pure fit would make the t² term negative
    c = fit_profile(prof).at(1)
    assert min(c.prefill.c0, c.prefill.per_token, c.prefill.per_sq) >= 0


def test_profile_file_is_a_hardware_argument(tmp_path):
    path = tmp_path / "cpu.json"
    write_profile(_profile(), path)
    model = load_latency_model(str(path), PRESETS["small-llama"])
    assert model.source == "profile:cpu:0"
    assert model.kv_capacity(1, 1) > 0
    assert model.at(2).prefill.per_token == pytest.approx(model.at(1).prefill.per_token / 2)
    with pytest.raises(ValueError, match="hardware"):
        load_latency_model(str(path), PRESETS["tiny-opt"])


def test_appendix_a_constants_reproduce_the_per_token_coefficient():
    shape = PRESETS["small-llama"]
    c = fit_profile(_profile()).at(1)
    consts = appendix_a_constants(c, shape, tp=1)
    h, m = shape.hidden, shape.ffn
    assert consts["C1"] * (4 * h * h + 2 * h * m) == pytest.approx(c.prefill.per_token)
    assert consts["C3"] == pytest.approx(c.prefill.c0)
