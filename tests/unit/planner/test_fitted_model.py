"""Replanning's latency model: the online fit's phases over the seed's."""

from dataclasses import asdict

from services.common.step_model.stored import describe, with_fit
from services.planner.hardware import shipped_model
from services.planner.shapes import load_shape

SEED = shipped_model("a100-80gb", load_shape("opt-13b"))


def _kind(role: str, phase: str, coeffs: dict, steps: int) -> dict:
    return {"role": role, "device": "cuda:0", phase: coeffs, "prefill" if phase == "decode" else "decode": None,
            "window": {"prefill_steps": steps if phase == "prefill" else 0, "decode_steps": steps if phase == "decode" else 0}}


def test_fitted_phases_replace_the_seeds_and_the_source_says_so():
    pre = {"c0": 0.03, "per_token": 2e-4, "per_sq": 1e-8}
    stored = {"fitted_at": 100.0, "kinds": {
        "prefill@cuda:0": _kind("prefill", "prefill", pre, 40),
        "prefill@cuda:1": _kind("prefill", "prefill", {"c0": 9.0, "per_token": 9.0, "per_sq": 9.0}, 3)}}
    model = with_fit(SEED, stored)
    tp = min(SEED.by_tp)
    assert set(model.by_tp) == {tp} and asdict(model.by_tp[tp].prefill) == pre  # the kind with the most steps
    assert model.by_tp[tp].decode_small == SEED.by_tp[tp].decode_small  # no decode fitted: the seed's
    assert model.source.startswith("fitted at 100: prefill from prefill@cuda:0 (40 steps); seed shipped:a100-80gb")
    assert model.kv_capacity(1, 1) == SEED.kv_capacity(1, 1) and model.at(2).prefill.per_token == 1e-4
    assert describe(model)["coefficients"][str(tp)]["prefill"] == pre
    assert with_fit(SEED, {"kinds": {}}) is SEED
