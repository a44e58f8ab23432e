"""Disaggregated serving between differing TP/PP layouts: a decode instance pulls exactly its layers and heads
from the prefill's rank pools, and the tokens equal in-process generation."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path

import pytest

from services.common.registry import Registry
from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from tests.e2e.helpers import generate, running_stack, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORDS = "each phase of a request picks its own parallelism and its own instances".split()
LAYOUTS = {  # (prefill TP, PP) → (decode TP, PP)
    "prefill-tp2-to-decode-tp1": dict(prefill_tp=2),
    "prefill-tp1-to-decode-tp2": dict(decode_tp=2),
    "prefill-pp2-to-decode-pp1": dict(prefill_pp=2),
}


def _workload(n: int) -> list[tuple[str, int]]:
    rng = random.Random(1)
    return [(" ".join(rng.choices(WORDS, k=rng.randint(1, 40))), rng.randint(2, 16)) for _ in range(n)]


def _reference(model: str, workload: list[tuple[str, int]]) -> list[list[int]]:
    """Greedy tokens of the workload from a local single-device engine."""
    tokenizer = load_tokenizer(model)
    reference = LLMEngine(EngineConfig(model, num_blocks=512))
    try:
        return reference.generate([tokenizer.encode(p) for p, _ in workload],
                                  [SamplingParams(max_tokens=m) for _, m in workload])
    finally:
        reference.close()


@pytest.mark.parametrize("layout", [pytest.param(name, marks=() if name == "prefill-tp2-to-decode-tp1" else pytest.mark.long)
                                    for name in LAYOUTS])
async def test_tokens_equal_local_generation_across_layouts(layout: str, tiny_llama_dir: str, redis_url: str) -> None:
    workload = _workload(12)
    expected = _reference(tiny_llama_dir, workload)
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", **LAYOUTS[layout]) as stack:
        results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                         for prompt, m in workload))
        for responses, want in zip(results, expected):
            assert [t for r in responses for t in r.token_ids] == want
        stats = await wait_idle(stack)
        assert [s.blocks_used for s in stats] == [0] * len(stats)  # every lease released, every block back


def _rank_pids(parent: int) -> list[int]:
    """Rank processes (services.engine.parallel.rank_main) whose parent is `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if ppid == parent and b"parallel.rank_main" in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.long
async def test_killing_a_rank_drops_its_instance_and_requests_go_on(tiny_llama_dir: str, redis_url: str) -> None:
    workload = _workload(6)
    expected = _reference(tiny_llama_dir, workload)
    with running_stack(tiny_llama_dir, redis_url, mode="disagg", prefill=2, prefill_tp=2) as stack:
        registry = Registry.from_url(stack.redis_url)
        try:
            victim = next(p for p in stack.procs if p.role == "prefill")
            (rank,) = _rank_pids(victim.process.pid)
            os.kill(rank, signal.SIGKILL)
            async with asyncio.timeout(30):  # its heartbeat notices within a second, then it deregisters
                while victim.name in {i.id for i in await registry.instances()}:
                    await asyncio.sleep(0.2)
            assert victim.process.wait(timeout=60) == 70  # it stopped, leaving no rank behind
            assert not _rank_pids(victim.process.pid)
            results = await asyncio.gather(*(generate(stack.router_address, prompt, max_tokens=m, temperature=0.0)
                                             for prompt, m in workload))
            for responses, want in zip(results, expected):
                assert [t for r in responses for t in r.token_ids] == want
        finally:
            await registry.close()
