"""TP 2, PP 2 and TP 2 x PP 2 instances (gloo rank processes on CPU) against the one-process engine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from services.common.sampling import SamplingParams
from services.engine import model_runner
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.parallel import runner as parallel_runner
from services.engine.parallel.procs import RankStartError
from services.engine.parallel.shard import ParallelConfigError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
torch.set_num_threads(1)

PROMPTS = [[1, *range(100, 140)], [1, 72, 105, 33], [1, *(3 + (i * 37) % 256 for i in range(70))], [1, 9, 8]]
PARAMS = SamplingParams(max_tokens=12, ignore_eos=True)
TABLE = [13, 2, 9, 4, 11, 6, 1, 8, 3, 10, 5, 12, 7, 0]  # a prompt's blocks, out of order
LAYOUTS = [(2, 1), (1, 2), (2, 2)]


def _config(model: str, tp: int = 1, pp: int = 1, **kw) -> EngineConfig:
    return EngineConfig(model, num_blocks=96, block_size=4, max_batch_tokens=512, tp=tp, pp=pp, **kw)


def _run(engine: LLMEngine, monkeypatch: pytest.MonkeyPatch, module) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy tokens of PROMPTS (one batch: PP splits it into micro-batches), and every step's logits sampled from."""
    seen: list[torch.Tensor] = []
    real = module.sample

    def recording(logits: torch.Tensor, seqs, *args):
        seen.append(logits.detach().clone())
        return real(logits, seqs, *args)

    monkeypatch.setattr(module, "sample", recording)
    return engine.generate(PROMPTS, PARAMS), seen


@pytest.fixture(scope="module", params=["llama-gqa", "opt"])
def model_dir(request, tiny_llama_dir: str, tiny_opt_dir: str) -> str:
    return tiny_llama_dir if request.param == "llama-gqa" else tiny_opt_dir


@pytest.fixture(scope="module")
def reference(model_dir: str) -> Iterator[tuple[LLMEngine, list[list[int]], list[torch.Tensor], torch.Tensor]]:
    engine = LLMEngine(_config(model_dir))
    with pytest.MonkeyPatch.context() as mp:
        tokens, logits = _run(engine, mp, model_runner)
    full = engine.runner.full_logits(PROMPTS[0], TABLE)
    yield engine, tokens, logits, full
    engine.close()


@pytest.mark.parametrize("tp, pp", LAYOUTS, ids=[f"tp{t}-pp{p}" for t, p in LAYOUTS])
def test_parallel_instance_equals_the_single_rank_reference(model_dir: str, reference, tp: int, pp: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _, ref_tokens, ref_logits, ref_full = reference
    engine = LLMEngine(_config(model_dir, tp, pp))
    try:
        tokens, logits = _run(engine, monkeypatch, parallel_runner)
        full = engine.runner.full_logits(PROMPTS[0], TABLE)
    finally:
        engine.close()
    assert tokens == ref_tokens
    assert len(logits) == len(ref_logits)  # same steps: rank 0 schedules as the single engine does
    assert max((a - b).abs().max().item() for a, b in zip(logits, ref_logits)) <= 1e-4
    assert (full - ref_full).abs().max().item() <= 1e-4
    assert not _rank_processes()


def _rank_processes() -> list[int]:
    """Rank processes this test process started that are still alive."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"services.engine.parallel.rank_main" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.long  # 6 to 10 s: a rank process starts
def test_a_parallel_instance_samples_under_a_grammar_as_one_rank_does(tiny_llama_dir: str) -> None:
    import json

    from services.common.grammars import from_json_schema
    from services.common.tokenizer import load_tokenizer

    schema = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": {"type": "integer", "maximum": 99}},
              "required": ["unit", "n"], "additionalProperties": False}
    params = [SamplingParams(max_tokens=40, temperature=1.0, seed=i, grammar=from_json_schema(schema, "f"))
              for i in range(len(PROMPTS))]
    outputs = []
    for layout in ({}, {"tp": 2}):
        engine = LLMEngine(_config(tiny_llama_dir, **layout))
        try:
            outputs.append(engine.generate(PROMPTS, [replace(p) for p in params]))
        finally:
            engine.close()
    assert outputs[0] == outputs[1]
    tokenizer = load_tokenizer(tiny_llama_dir)
    assert all(json.loads(tokenizer.decode(tokens))["unit"] in "cf" for tokens in outputs[1])
    assert not _rank_processes()


def test_tp_not_dividing_the_heads_names_tp_and_starts_nothing(tiny_llama_dir: str) -> None:
    with pytest.raises(ParallelConfigError, match=r"--tp: 3 does not divide the model's 4 attention heads"):
        LLMEngine(_config(tiny_llama_dir, tp=3))
    assert not _rank_processes()


def test_more_ranks_than_devices_names_devices_and_starts_nothing(tiny_llama_dir: str) -> None:
    with pytest.raises(ParallelConfigError, match="--devices"):
        LLMEngine(_config(tiny_llama_dir, tp=2, pp=2, devices=("cpu", "cpu", "cpu")))
    assert not _rank_processes()


def test_a_rank_that_cannot_start_is_named_and_nothing_is_left_running(tiny_llama_dir: str) -> None:
    with pytest.raises(RankStartError, match=r"rank 2 \(device cpu:4096\) did not start.*cpu:4096") as err:
        LLMEngine(_config(tiny_llama_dir, tp=2, pp=2, devices=("cpu", "cpu", "cpu:4096", "cpu")))
    assert err.value.rank == 2
    assert not _rank_processes()


def test_generate_local_with_tp_and_pp_prints_the_single_rank_tokens(tiny_llama_dir: str, capsys) -> None:
    import json

    from services.cli import main

    outputs = []
    for layout in ([], ["--tp", "2", "--pp", "2"]):
        with pytest.raises(SystemExit) as done:
            main(["generate", "--local", "--model", tiny_llama_dir, "Hello", "--max-tokens", "6", "--ignore-eos",
                  "--json", *layout])
        assert done.value.code in (0, None)
        outputs.append(json.loads(capsys.readouterr().out)["token_ids"])
    assert outputs[0] == outputs[1]
    assert not _rank_processes()


def test_a_rank_that_dies_fails_the_step_and_nothing_hangs(tiny_llama_dir: str) -> None:
    import signal
    import time

    engine = LLMEngine(_config(tiny_llama_dir, tp=2))
    try:
        assert engine.lost_rank() is None
        os.kill(_rank_processes()[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while engine.lost_rank() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "rank 1 (device cpu) exited" in engine.lost_rank()
        started = time.monotonic()
        with pytest.raises(RuntimeError):
            engine.generate([PROMPTS[1]], PARAMS)
        assert time.monotonic() - started < 30
    finally:
        engine.close()
    assert not _rank_processes()


def test_ranks_started_on_their_own_join_rank_0_at_its_rendezvous(tiny_llama_dir: str, reference) -> None:
    import subprocess
    import sys

    from services.common.net import free_port

    if reference[0].config.model != tiny_llama_dir:
        pytest.skip("one model is enough")
    rendezvous = f"127.0.0.1:{free_port()}"
    rank = subprocess.Popen([sys.executable, "-m", "services", "rank", "--rendezvous", rendezvous, "--rank", "1",
                             "--device", "cpu"])
    try:
        engine = LLMEngine(_config(tiny_llama_dir, tp=2, rendezvous=rendezvous))
        try:
            tokens = engine.generate(PROMPTS, PARAMS)
        finally:
            engine.close()
        assert tokens == reference[1]
        assert rank.wait(timeout=30) == 0  # rank 0 closing tells it to stop
    finally:
        rank.kill()


def test_profile_records_a_tp_instance(tiny_llama_dir: str, tmp_path: Path, capsys) -> None:
    import json

    from services.cli import main

    out = tmp_path / "profile.json"
    with pytest.raises(SystemExit) as done:
        main(["profile", "--model", tiny_llama_dir, "--device", "cpu", "--tp", "2", "--max-tokens", "128",
              "--repeats", "1", "--out", str(out)])
    assert done.value.code in (0, None)
    profile = json.loads(out.read_text())
    assert (profile["tp"], profile["pp"]) == (2, 1) and len(profile["prefill"]) >= 3 and len(profile["decode"]) >= 3
    assert "(TP 2 x PP 1)" in capsys.readouterr().out
    assert not _rank_processes()


def test_tp2_with_prefix_caching_equals_the_uncached_single_rank_engine(tiny_llama_dir: str) -> None:
    from tests.unit.engine.test_prefix_cache import PROMPTS as SHARING
    from tests.unit.engine.test_prefix_cache import assert_same, run

    reference = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64, block_size=4, prefix_caching="off"))
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64, block_size=4, tp=2))
    try:
        assert_same(run(engine, SHARING), run(reference, SHARING))
        assert engine.scheduler.cache.hit == (9 + 5 + 10) * 4
    finally:
        engine.close()
        reference.close()
    assert not _rank_processes()
