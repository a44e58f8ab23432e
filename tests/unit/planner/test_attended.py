"""The latency model's attention terms per layer group (`services/common/step_model/attended.py`): a sliding
layer's attention counts its window only, in the decode lanes' context, the prefill's t2 and the colocated steps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from services.common.step_model import prompt_sq
from services.common.step_model.attended import FULL
from services.common.step_model.latency import DecodeCoeffs, PrefillCoeffs, TPCoefficients
from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile, fit_coefficients
from services.planner.colocated import simulate_colocated
from services.planner.shapes import PRESETS
from services.planner.simulator import simulate_decode, simulate_prefill

WINDOW = 64


def _shape(sliding: int):
    """A 6-layer model with `sliding` layers of window 64."""
    return replace(PRESETS["tiny-llama"], layers=6, sliding_layers=sliding, window=WINDOW)


def test_a_model_without_sliding_layers_keeps_the_plain_terms() -> None:
    assert PRESETS["small-llama"].attended == FULL
    assert FULL.context(5000) == 5000 and FULL.prompt_sq(300, 700) == prompt_sq(300, 700)


@pytest.mark.parametrize("sliding", [6, 5])
def test_sliding_terms_count_the_window(sliding: int) -> None:
    attended = _shape(sliding).attended
    share = sliding / 6
    assert attended.context(WINDOW) == WINDOW and attended.prompt_sq(WINDOW, 0) == WINDOW**2
    assert attended.context(1000) == pytest.approx((1 - share) * 1000 + share * WINDOW)
    # chunks add up to the whole prompt, as prompt_sq's do, whatever the cut
    whole = attended.prompt_sq(1000, 0)
    assert attended.prompt_sq(40, 0) + attended.prompt_sq(500, 40) + attended.prompt_sq(460, 540) == pytest.approx(whole)
    # the windowed square is twice the keys the queries see (Σ 2·min(p + 1, w)) up to the window's own triangle
    keys = sum(min(p + 1, WINDOW) for p in range(1000))
    assert whole == pytest.approx((1 - share) * 1000**2 + share * 2 * keys, rel=0.01)


@pytest.mark.parametrize("sliding", [6, 5, 0])
def test_decode_lanes_charge_each_sequence_its_windowed_context(sliding: int) -> None:
    """Every request at once on one lane: each step's time is c0 + per_ctx · Σ context(L) + per_req · b, the
    sequences crossing the window at their own steps (brute force over the steps here)."""
    shape = _shape(sliding)
    coeffs = TPCoefficients(PrefillCoeffs(0, 0, 0), DecodeCoeffs(1e-3, 1e-5, 1e-4), DecodeCoeffs(1e-3, 1e-5, 1e-4))
    prompts, outputs = [10, 50, 62, 63, 64, 100, 200, 30], [5, 30, 2, 3, 10, 20, 3, 40]
    tpot = simulate_decode(coeffs, 1, 1 << 20, np.array(prompts), np.array(outputs), np.zeros(len(prompts)),
                           shape=shape)
    lens, left, clock, finish = [p + 1 for p in prompts], [o - 1 for o in outputs], 0.0, {}
    active = set(range(len(prompts)))
    while active:
        clock += 1e-3 + 1e-5 * sum(shape.attended.context(lens[i]) for i in active) + 1e-4 * len(active)
        for i in sorted(active):
            lens[i], left[i] = lens[i] + 1, left[i] - 1
            if not left[i]:
                finish[i] = clock
                active.remove(i)
    assert tpot == pytest.approx([finish[i] / (outputs[i] - 1) for i in range(len(prompts))])


def test_a_prefill_charges_the_windowed_square() -> None:
    coeffs = TPCoefficients(PrefillCoeffs(0.01, 1e-4, 1e-7), DecodeCoeffs(0, 0, 0), DecodeCoeffs(0, 0, 0))
    shape = _shape(5)
    ttft = simulate_prefill(coeffs, 1, 1 << 20, np.array([2000]), np.zeros(1), shape=shape)
    assert ttft[0] == pytest.approx(0.01 + 0.2 + 1e-7 * shape.attended.prompt_sq(2000, 0))
    full = simulate_prefill(coeffs, 1, 1 << 20, np.array([2000]), np.zeros(1))
    assert full[0] == pytest.approx(0.01 + 0.2 + 1e-7 * 2000**2)


def test_colocated_steps_count_the_window_too() -> None:
    coeffs = TPCoefficients(PrefillCoeffs(0.01, 1e-5, 1e-8), DecodeCoeffs(1e-3, 1e-5, 1e-4),
                            DecodeCoeffs(1e-3, 1e-5, 1e-4))
    prompts, outputs = np.array([3000, 3000]), np.array([50, 50])
    args = (coeffs, "chunked", 1, 1 << 20, 512, prompts, outputs, np.zeros(2))
    full, sliding = simulate_colocated(*args), simulate_colocated(*args, shape=_shape(6))
    assert (sliding.ttft < full.ttft).all() and (sliding.tpot < full.tpot).all()
    # one request, every layer sliding: its decode steps attend to the window's keys, whatever its context
    alone = simulate_colocated(coeffs, "chunked", 1, 1 << 20, 512, prompts[:1], outputs[:1], np.zeros(1),
                               shape=_shape(6))
    assert alone.tpot[0] == pytest.approx(1e-3 + 1e-5 * WINDOW + 1e-4)


def test_a_profile_of_a_sliding_model_is_fitted_in_its_own_units() -> None:
    """Points timed as the windowed lines say give those lines back (counting every token would not)."""
    shape, truth = _shape(5), TPCoefficients(PrefillCoeffs(0.01, 1e-5, 1e-8), DecodeCoeffs(2e-3, 1e-6, 1e-4),
                                              DecodeCoeffs(2e-3, 1e-6, 1e-4))
    attended = shape.attended
    prefill = [PrefillPoint(prompt_lens=lens, seconds=truth.prefill_time(sum(lens), sum(attended.prompt_sq(n, 0)
                                                                                          for n in lens)))
               for lens in ([32], [256], [1024], [2048], [512, 64], [128] * 4)]
    decode = [DecodePoint(context_lens=lens, seconds=truth.decode_time(sum(attended.context(c) for c in lens), len(lens)))
              for lens in ([16], [1024], [2048] * 4, [64] * 8, [512] * 16)]
    profile = ProfileFile(model=shape.as_dict(), device="cpu:0", prefill=prefill, decode=decode)
    fitted = fit_coefficients(profile)
    assert fitted.prefill.per_sq == pytest.approx(1e-8) and fitted.decode_small.per_ctx == pytest.approx(1e-6)
    every_layer_full = profile.model_copy(update={"model": {**shape.as_dict(), "sliding_layers": 0}})
    assert fit_coefficients(every_layer_full).decode_small.per_ctx < 0.5e-6
