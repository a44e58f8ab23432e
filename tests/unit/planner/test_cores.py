"""The planner on a CPU host: an instance of two cores as one process of two threads or as TP over two one-core
ranks, chosen per phase from profiles of each.

The profiles (data/cores/) were recorded on the development host (2 cores, AMD EPYC, shared with other work; each
file from a run while the host was otherwise idle) with `distserve profile --model small-llama --max-tokens 512
--best-of 3` and `--device cpu:0` (cpu0.json), `--device cpu:0-1` (cpu01.json), `--device cpu:0 --tp 2` (tp2.json).
There TP 2 prefills a 128-token prompt in 83 ms, two threads in 112 and one core in 154; a decode step of one
request takes 11.7 ms on two threads, 12.7 ms under TP 2 (whose all-reduces a lone request's short step pays) and
14.0 ms on one core, and TP 2 is the faster from two requests on.
"""

import argparse
import json
from pathlib import Path

import pytest

from services import planner_cli
from services.common.slo import SLO
from services.common.step_model.profile_fit import read_profile
from services.planner.goodput import Scenario
from services.planner.hardware import load_latency_model
from services.planner.placement import Cluster, Parallel
from services.planner.search import high_affinity
from services.planner.service import layouts_dict
from services.planner.shapes import PRESETS
from services.planner.workload import Workload

RECORDED = Path(__file__).parent / "data" / "cores"
SHAPE = PRESETS["small-llama"]
THREADS, TP = Parallel(1, 1, threads=2), Parallel(2, 1)


def _scenario(hardware: str) -> Scenario:
    """Eight nodes of two cores; 128-token prompts within 0.14 s, which one core misses, and a token every 12.5 ms,
    which only the faster layout at one request meets."""
    model = load_latency_model(hardware, SHAPE, gpu_memory_gb=2.0)
    return Scenario(model, Cluster(8, 2, gpu_memory_gb=2.0), Workload("fixed", input_len=128, output_len=8),
                    SLO(0.14, 0.0125, 0.9), num_requests=200, max_requests=400)


def test_a_profile_of_two_cores_is_a_layout_of_one_rank_on_two_cores():
    assert [read_profile(RECORDED / f).threads for f in ("cpu0.json", "cpu01.json", "tp2.json")] == [1, 2, 1]
    model = load_latency_model(str(RECORDED), SHAPE)
    assert model.threads_at(1) == [1, 2] and model.threads_at(2) == [1]
    measured = next(p.seconds for p in read_profile(RECORDED / "cpu01.json").prefill if p.prompt_lens == [512])
    assert model.at(1, threads=2).prefill_time(512, 512 * 512) == pytest.approx(measured, rel=0.1)


def test_threads_decode_and_tp_prefills_where_each_is_the_faster():
    plan = high_affinity(_scenario(str(RECORDED)), workers=1)
    assert (plan.placement.prefill, plan.placement.decode) == (TP, THREADS)
    best = {phase: layouts_dict(plan, phase)[0] for phase in ("prefill", "decode")}
    assert (best["prefill"]["tp"], best["decode"]["threads"]) == (2, 2)


def test_swapped_measurements_swap_the_plan(tmp_path):
    """The same files with the two layouts' labels swapped: TP now has the threads' times and the reverse."""
    relabel = {"cpu0.json": {}, "cpu01.json": {"device": "cpu:0", "tp": 2}, "tp2.json": {"device": "cpu:0-1", "tp": 1}}
    for name, fields in relabel.items():
        (tmp_path / name).write_text(json.dumps({**json.loads((RECORDED / name).read_text()), **fields}))
    plan = high_affinity(_scenario(str(tmp_path)), workers=1)
    assert (plan.placement.prefill, plan.placement.decode) == (THREADS, TP)


def test_a_layout_without_a_profile_is_refused():
    model = load_latency_model(str(RECORDED), SHAPE)
    with pytest.raises(ValueError, match="TP 2 with 2 cores per rank"):
        model.at(2, threads=2)


def test_distserve_plan_says_which_layout_each_phase_took_and_why(capsys):
    parser = argparse.ArgumentParser()
    planner_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", "--model", "small-llama", "--hardware", str(RECORDED), "--nodes", "8",
                              "--gpus-per-node", "2", "--gpu-memory-gb", "2", "--input-len", "128", "--output-len", "8",
                              "--ttft", "0.14", "--tpot", "0.0125", "--num-requests", "200", "--workers", "1",
                              "--plot", "", "--json"])
    assert args.func(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["prefill"]["tp"], plan["prefill"]["threads"], plan["decode"]["tp"], plan["decode"]["threads"]) == \
        (2, 1, 1, 2)
    table = planner_cli.format_table(plan)
    chosen = [line for line in table.splitlines() if line.endswith("<- chosen")]
    assert [line.split()[0] for line in chosen] == ["prefill", "decode"]
    assert "1 core per rank" in chosen[0] and "2 cores per rank" in chosen[1]
    assert set(plan["latency_model"]["threaded"]) == {"1x2"}  # which measured coefficients planned it
