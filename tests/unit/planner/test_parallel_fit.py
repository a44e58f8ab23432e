"""The planner's parallel model fitted to TP/PP profiles: K and the stage cost come back from points made with
them, the planner's coefficients use them, and the profiles recorded on the development host give a K in (1, 2]."""

from pathlib import Path

import numpy as np
import pytest

from services.common.step_model.parallel_fit import fit_parallel
from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile, read_profile, write_profile
from services.planner.hardware import load_latency_model
from services.planner.shapes import PRESETS

RECORDED = Path(__file__).parent / "data" / "parallel"  # `distserve profile --tp/--pp` on the development host


def _profile(tp: int, pp: int, k: float, stage: tuple[float, float, float, float], seed: int) -> ProfileFile:
    """TP 1 × PP 1 step times divided by k per doubling of tp, plus pp − 1 hand-offs of (fixed, per token) for
    prefill and (fixed, per request) for decode; 1% noise."""
    rng = np.random.default_rng(seed)
    div = k ** np.log2(tp)
    hops = pp - 1

    def noisy(seconds: float) -> float:
        return seconds * (1 + 0.01 * rng.standard_normal())

    prefill = [PrefillPoint(prompt_lens=[n] * b, seconds=noisy((5 + 0.02 * n * b) / 1e3 / div
                                                               + hops * (stage[0] + stage[1] * n * b)))
               for n in (16, 64, 256, 512) for b in (1, 2, 4)]
    decode = [DecodePoint(context_lens=[n] * b, seconds=noisy((3 + 0.001 * n * b + 0.05 * b) / 1e3 / div
                                                              + hops * (stage[2] + stage[3] * b)))
              for n in (32, 128, 512) for b in (1, 4, 16, 32)]
    return ProfileFile(model=PRESETS["small-llama"].as_dict(), device="cpu:0", tp=tp, pp=pp, prefill=prefill,
                       decode=decode)


STAGE = (2e-3, 4e-6, 1e-3, 2e-5)


def test_k_and_the_stage_cost_come_back_and_the_planner_uses_them(tmp_path) -> None:
    for tp, pp, seed in ((1, 1, 0), (2, 1, 1), (1, 2, 2)):
        write_profile(_profile(tp, pp, 1.6, STAGE, seed), tmp_path / f"tp{tp}pp{pp}.json")
    model = load_latency_model(str(tmp_path), PRESETS["small-llama"])
    c = model.parallel
    assert c.k_prefill == pytest.approx(1.6, rel=0.03) and c.k_decode == pytest.approx(1.6, rel=0.03)
    assert c.stage_prefill[1] == pytest.approx(STAGE[1], rel=0.15) and c.stage_decode[1] == pytest.approx(STAGE[3], rel=0.3)
    assert c.measured == ((1, 1), (1, 2), (2, 1))
    # TP 4 was not profiled: TP 2's size-dependent terms divided by K once more, not by 2
    assert model.at(4).prefill.per_token == pytest.approx(model.at(2).prefill.per_token / c.k_prefill)
    # PP 2 adds one hand-off to every step; PP 1 none
    assert model.at(1, 2).prefill_time(1024, 0) - model.at(1).prefill_time(1024, 0) == \
        pytest.approx(c.stage_prefill[0] + c.stage_prefill[1] * 1024)
    assert model.at(1, 4).decode_time(0, 8) - model.at(1).decode_time(0, 8) == \
        pytest.approx(3 * (c.stage_decode[0] + c.stage_decode[1] * 8))


def test_profiles_without_a_tp1_pp1_base_or_common_points_are_refused() -> None:
    with pytest.raises(ValueError, match="TP 1 x PP 1 profile is needed"):
        fit_parallel([_profile(2, 1, 1.6, STAGE, 0), _profile(1, 2, 1.6, STAGE, 1)])
    base, other = _profile(1, 1, 1.6, STAGE, 0), _profile(2, 1, 1.6, STAGE, 1)
    other = other.model_copy(update={"prefill": [PrefillPoint(prompt_lens=[7 + i], seconds=0.01) for i in range(3)]})
    with pytest.raises(ValueError, match="share 0 prefill points"):
        fit_parallel([base, other])


@pytest.mark.skipif(not RECORDED.is_dir(), reason="no recorded profiles")
def test_recorded_profiles_of_this_engine_give_a_speed_up_between_one_and_two() -> None:
    """Recorded with small-llama, one core per rank (docs/parallel.md, *The planner's parallel model*)."""
    model = fit_parallel([read_profile(f) for f in sorted(RECORDED.glob("*.json"))])
    c = model.parallel
    assert 1.0 < c.k_prefill <= 2.0  # TP 2 shortens a prefill, by less than the ideal 2
    assert c.stage_prefill[0] + c.stage_prefill[1] * 512 >= 0
    assert model.at(2).prefill_time(512, 512 ** 2) < model.at(1).prefill_time(512, 512 ** 2)
