"""The planner's placement applied to a local stack: instances start, drain and stop, and serving goes on."""

from __future__ import annotations

import asyncio

import pytest

from services.engine.make_model import make_model
from services.launcher.stack_actuator import StackActuator
from services.planner.actuation import apply_placement
from services.planner.placement import Instance, Parallel, Placement, Stage
from tests.e2e.helpers import generate, instance_stats, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _placement(n_prefill: int, n_decode: int) -> Placement:
    one = Parallel(1, 1)
    instances = tuple(Instance("prefill", i, (Stage(0, (i,)),)) for i in range(n_prefill))
    instances += tuple(Instance("decode", i, (Stage(0, (n_prefill + i,)),)) for i in range(n_decode))
    return Placement(one, one, n_prefill, n_decode, instances)


def test_apply_placement_scales_the_stack(tiny_llama_dir: str, redis_url: str) -> None:
    with running_stack(tiny_llama_dir, redis_url, mode="disagg") as stack:
        actuator = StackActuator(stack)
        before = {r.id for r in actuator.running()}
        done = apply_placement(actuator, _placement(1, 2))  # one more decode instance
        assert len(done.started) == 1 and not done.stopped and set(done.kept) == before
        assert sorted(s.role for s in instance_stats(stack)) == ["decode", "decode", "prefill"]
        assert asyncio.run(generate(stack.router_address, "after scale-up", max_tokens=4, temperature=0.0))

        done = apply_placement(actuator, _placement(1, 1))  # and back
        assert len(done.stopped) == 1
        assert sorted(r.spec.role for r in actuator.running()) == ["decode", "prefill"]
        responses = asyncio.run(generate(stack.router_address, "after scale-down", max_tokens=4, temperature=0.0, ignore_eos=True))
        assert sum(len(r.token_ids) for r in responses) == 4


def _tokens(stack) -> list[int]:
    responses = asyncio.run(generate(stack.router_address, "tensor parallel", max_tokens=6, temperature=0.0,
                                     ignore_eos=True))
    return [t for r in responses for t in r.token_ids]


def _tp2_prefill(ep: int) -> Placement:
    return Placement(Parallel(2, 1, ep), Parallel(1, 1), 1, 1, (
        Instance("prefill", 0, (Stage(0, (0, 1)),)), Instance("decode", 0, (Stage(0, (1,)),))))


@pytest.mark.long
def test_apply_placement_runs_a_tensor_parallel_prefill(tiny_llama_dir: str, redis_url: str) -> None:
    with running_stack(tiny_llama_dir, redis_url, mode="disagg") as stack:
        reference = _tokens(stack)
        actuator = StackActuator(stack)
        placement = _tp2_prefill(1)
        done = apply_placement(actuator, placement)
        assert len(done.started) == 1 and len(done.stopped) == 1  # the TP 1 prefill replaced, the decode kept
        prefill = next(r.spec for r in actuator.running() if r.spec.role == "prefill")
        assert (prefill.tp, prefill.pp, prefill.ep, prefill.stages) == (2, 1, 1, (Stage(0, (0, 1)),))
        assert _tokens(stack) == reference
        assert not apply_placement(actuator, placement).started  # read back as planned (a dense model's ep 1): kept


@pytest.mark.long
def test_apply_placement_launches_the_planned_expert_groups(redis_url: str, tmp_path) -> None:
    """A MoE prefill at TP 2 with EP 1 (each expert split over both ranks), then EP 2: EP is part of an
    instance's shape, so the second plan replaces it; tokens stay those of the TP 1 stack."""
    folder = str(make_model("tiny-qwen3-moe", tmp_path / "m"))
    with running_stack(folder, redis_url, mode="disagg") as stack:
        reference = _tokens(stack)
        actuator = StackActuator(stack)
        for ep in (1, 2):
            done = apply_placement(actuator, _tp2_prefill(ep))
            assert (len(done.started), len(done.stopped)) == (1, 1)
            assert [r.spec.ep for r in actuator.running() if r.spec.role == "prefill"] == [ep]
            assert _tokens(stack) == reference


@pytest.mark.long
def test_apply_placement_runs_a_decode_instance_on_two_cores(tiny_llama_dir: str, redis_url: str) -> None:
    with running_stack(tiny_llama_dir, redis_url, mode="disagg") as stack:
        reference = _tokens(stack)
        actuator = StackActuator(stack)
        placement = Placement(Parallel(1, 1), Parallel(1, 1, threads=2), 1, 1, (
            Instance("prefill", 0, (Stage(0, (0,)),)), Instance("decode", 0, (Stage(0, (0, 1)),))))
        done = apply_placement(actuator, placement)
        assert len(done.started) == 1 and len(done.stopped) == 1  # the one-core decode replaced, the prefill kept
        decode = next(r.spec for r in actuator.running() if r.spec.role == "decode")
        assert (decode.tp, decode.threads, decode.stages) == (1, 2, (Stage(0, (0, 1)),))
        assert _tokens(stack) == reference
