"""generation_config.json: every end-of-sequence id stops generation; its sampling values are the defaults of
requests that omit them (both front ends), unless `--generation-config none`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from distserve.v1 import router_pb2
from services.common.generation_config import SamplingDefaults
from services.common.model_config import ModelConfig
from services.common.sampling import FinishReason, SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.router.openai_models import CompletionBody
from services.router.server import params_from_request

PROMPT = [1, *range(60, 80)]


def _with_generation_config(src: str, dst: Path, **values) -> str:
    shutil.copytree(src, dst)
    (dst / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, **values}))
    return str(dst)


def test_a_second_eos_id_of_generation_config_stops_generation(tiny_llama_dir: str, tmp_path: Path) -> None:
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=32))
    (free,) = engine.generate([PROMPT], greedy)
    engine.close()
    stop_at = next(i for i, t in enumerate(free) if t not in free[:i] and t != 2 and i >= 2)
    folder = _with_generation_config(tiny_llama_dir, tmp_path / "m", eos_token_id=[2, free[stop_at]])
    assert ModelConfig.from_folder(folder).eos_token_ids == (2, free[stop_at])
    engine = LLMEngine(EngineConfig(folder, num_blocks=32))
    try:
        engine.add_request("r", PROMPT, greedy)
        outs = [o for _ in range(40) if engine.has_work() for o in engine.step()]
    finally:
        engine.close()
    assert [t for o in outs for t in o.new_token_ids] == free[: stop_at + 1]  # the eos token ends the output
    assert outs[-1].finish_reason is FinishReason.STOP


def test_sampling_defaults_fill_only_what_a_request_omits(tiny_llama_dir: str, tmp_path: Path) -> None:
    folder = _with_generation_config(tiny_llama_dir, tmp_path / "m", temperature=0.6, top_p=0.9, top_k=20,
                                     repetition_penalty=1.1, do_sample=True)
    defaults = SamplingDefaults.from_folder(folder)
    assert defaults == SamplingDefaults(0.6, 0.9, 20, 1.1)
    assert SamplingDefaults.from_folder(folder, "none") == SamplingDefaults() == SamplingDefaults.from_folder(tiny_llama_dir)
    grpc_params = params_from_request(router_pb2.GenerateRequest(prompt="x", top_k=0, temperature=0.0), 16, defaults)
    assert (grpc_params.temperature, grpc_params.top_p, grpc_params.top_k, grpc_params.repetition_penalty) == \
        (0.0, pytest.approx(0.9), 0, pytest.approx(1.1))
    http = CompletionBody(prompt="x", top_p=0.5).sampling(defaults)
    assert http == {"temperature": 0.6, "top_p": 0.5, "top_k": 20, "repetition_penalty": 1.1}


def test_a_sampling_value_no_request_could_carry_is_refused_at_start(tiny_llama_dir: str, tmp_path: Path) -> None:
    folder = _with_generation_config(tiny_llama_dir, tmp_path / "m", top_p=0.0)
    with pytest.raises(ValueError, match="generation_config.json: top_p"):
        SamplingDefaults.from_folder(folder)
