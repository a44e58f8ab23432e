"""A synthetic small-llama profile and a predictor from it, shared by the prediction tests."""

import pytest

from services.bench.predict import Predictor
from services.common.step_model.profile_fit import DecodePoint, PrefillPoint, ProfileFile, write_profile
from services.planner.shapes import PRESETS


@pytest.fixture()
def profile_path(tmp_path) -> str:
    path = tmp_path / "profile.json"
    write_profile(ProfileFile(
        model=PRESETS["small-llama"].as_dict(), device="cpu:0",
        prefill=[PrefillPoint(prompt_lens=[n] * b, seconds=5e-3 + 3e-4 * n * b + 2e-6 * n * n * b)
                 for n in (16, 64, 256) for b in (1, 2)],
        decode=[DecodePoint(context_lens=[c] * b, seconds=0.017 + 8e-6 * c * b + 1e-3 * b)
                for c in (16, 256) for b in (1, 4)]), path)
    return str(path)


@pytest.fixture()
def predictor(profile_path) -> Predictor:
    return Predictor.from_profile(profile_path, kv_tokens=16384, max_batch_tokens=512, link_gbps=10.0)
