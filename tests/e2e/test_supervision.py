"""SIGKILL of each kind of child under a steady load of greedy streams: the supervisor brings it back, every
stream in flight is exact or gets a retryable error, new requests are served again within RECOVERY_BOUND_S,
and afterwards nothing is allocated. SIGKILL of the launcher: nothing of its stack survives it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import psutil
import pytest

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.links import RECONNECT_OPTIONS
from services.common.net import free_port
from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from services.launcher.health import is_serving
from services.launcher.stack import Stack, StackConfig
from services.launcher.supervisor import Supervisor
from tests.e2e.fault_checks import all_alive, seconds_until_nothing_allocated

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]
PROMPTS = [f"stream {i} of a steady load" for i in range(6)]
MAX_TOKENS = 40
RECOVERY_BOUND_S = 30.0  # goal 10 s (met on the 2-core host at load 8-9); slack for a host shared with other work
RETRYABLE = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"}


@pytest.fixture(scope="module")
def reference(tiny_llama_dir: str) -> dict[str, list[int]]:
    tokenizer = load_tokenizer(tiny_llama_dir)
    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=128))
    outs = engine.generate([tokenizer.encode(p) for p in PROMPTS], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    engine.close()
    return dict(zip(PROMPTS, outs))


@contextmanager
def supervised(model: str, prefill: int, extra_env: dict[str, str] | None = None) -> Iterator[tuple[Stack, Supervisor]]:
    devices = ("cpu:0",) * prefill + ("cpu:1",)
    stack = Stack(StackConfig(model=model, mode="disagg", prefill=prefill, decode=1, devices=devices,
                              grpc_port=free_port(), http_port=free_port(), num_blocks=256, max_batch_tokens=128,
                              lease_ttl_s=120.0, log_level="WARNING", drain_grace_s=5.0, supervised=True,
                              extra_env=extra_env or {}))
    stack.start()
    supervisor = Supervisor(stack).start()
    try:
        yield stack, supervisor
    finally:
        supervisor.stop()
        stack.stop()


@dataclass
class Load:
    """Greedy streams, `workers` at a time, each compared with the local engine's tokens."""

    address: str
    reference: dict[str, list[int]]
    workers: int = 3
    outcomes: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, exact|mismatch|CODE)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    http: str = ""  # the router's HTTP base: one more client streams over SSE
    sse: list[str] = field(default_factory=list)  # exact | error:<type> | gone (the router itself died)

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = router_pb2_grpc.RouterStub(channel)
            await asyncio.gather(*(self._worker(stub, i) for i in range(self.workers)), self._sse_worker())

    async def _sse_worker(self) -> None:
        """A stream that fails mid-way must say so in an error event, then end with [DONE]."""
        async with httpx.AsyncClient(base_url=self.http, timeout=60) as client:
            n = 0
            while not self._stop.is_set():
                prompt = PROMPTS[n % len(PROMPTS)]
                n += 1
                events: list[str] = []
                try:
                    async with client.stream("POST", "/v1/completions", json={
                            "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                            "stream": True}) as reply:
                        if reply.status_code != 200:
                            self.sse.append(f"status:{reply.status_code}")
                            await asyncio.sleep(0.2)
                            continue
                        events = [line[6:] async for line in reply.aiter_lines() if line.startswith("data: ")]
                except httpx.TransportError:
                    self.sse.append("gone")
                    await asyncio.sleep(0.2)
                    continue
                assert events and events[-1] == "[DONE]", events[-3:]
                bodies = [json.loads(e) for e in events[:-1]]
                if "error" in bodies[-1]:
                    self.sse.append(f"error:{bodies[-1]['error']['type']}")
                else:
                    got = [t for b in bodies for t in b["token_ids"]]
                    self.sse.append("exact" if got == self.reference[prompt] else "mismatch")

    async def _worker(self, stub, index: int) -> None:
        n = index
        while not self._stop.is_set():
            prompt = PROMPTS[n % len(PROMPTS)]
            n += self.workers
            start = time.monotonic()
            try:
                got = [t async for r in stub.Generate(router_pb2.GenerateRequest(
                    prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True), timeout=60)
                       for t in r.token_ids]
                outcome = "exact" if got == self.reference[prompt] else "mismatch"
            except grpc.aio.AioRpcError as exc:
                outcome = exc.code().name
                await asyncio.sleep(0.2)  # as a client told "retry" would
            self.outcomes.append((start, time.monotonic(), outcome))

    def stop(self) -> None:
        self._stop.set()


async def _first_served(address: str, reference: dict[str, list[int]], after: float) -> float:
    """Monotonic time at which a request sent after `after` first came back exact."""
    async with grpc.aio.insecure_channel(address, RECONNECT_OPTIONS) as channel:  # a client retrying each 0.1 s
        stub = router_pb2_grpc.RouterStub(channel)
        while time.monotonic() - after < 120:
            try:
                got = [t async for r in stub.Generate(router_pb2.GenerateRequest(
                    prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True), timeout=30)
                       for t in r.token_ids]
                if got == reference[PROMPTS[0]]:
                    return time.monotonic()
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("not served again within 120 s")


def _victim(stack: Stack, kind: str):
    if kind == "redis":
        return stack.embedded_redis.process, ""
    proc = next(p for p in stack.procs if kind in (p.role, p.name))
    return proc.process, proc.address


async def _serving_again(address: str, after: float) -> float:
    """Monotonic time at which the server at `address` answered SERVING again (a restarted process's own start)."""
    while time.monotonic() - after < 120:
        if await asyncio.to_thread(is_serving, address, 0.5):
            return time.monotonic()
        await asyncio.sleep(0.05)
    return float("nan")


async def _kill_each(stack: Stack, supervisor: Supervisor, reference, kinds: list[str]) -> list[dict]:
    load = Load(stack.router_address, reference, http=f"http://{stack.config.host}:{stack.config.http_port}")
    running = asyncio.create_task(load.run())
    rows = []
    try:
        for kind in kinds:
            await asyncio.sleep(3.0)  # streams in flight at the kill
            before = len(load.outcomes)
            victim, address = _victim(stack, kind)
            killed = time.monotonic()
            victim.kill()
            await asyncio.to_thread(victim.wait)
            serving = asyncio.create_task(_serving_again(address, killed)) if address else None
            served = await _first_served(stack.router_address, reference, killed)
            await asyncio.sleep(2.0)
            restarts = [at for name, at in supervisor.restarted if at >= killed and (name == kind or kind in name)]
            assert restarts or kind == "redis"
            # Where the time goes: the restart's backoff, the process's own start, then the router finding it.
            breakdown = {"restart_s": round(restarts[0] - killed, 2) if restarts else None,
                         "serving_s": round(await serving - killed, 2) if serving else None}
            window = [o for o in load.outcomes[before:] if o[0] < killed + 1.0]
            rows.append({"fault": f"SIGKILL {kind}", "sent": len(window),
                         "exact": sum(o[2] == "exact" for o in window),
                         "failed": dict(Counter(o[2] for o in window if o[2] != "exact")),
                         "recovery_s": round(served - killed, 2), **breakdown})
            print(rows[-1], flush=True)
    finally:
        load.stop()
        await running
    assert not [o for o in load.outcomes if o[2] not in {"exact"} | RETRYABLE], Counter(o[2] for o in load.outcomes)
    print("SSE streams:", dict(Counter(load.sse)), flush=True)
    assert set(load.sse) <= {"exact", "error:service_unavailable", "status:503", "gone"}, Counter(load.sse)
    seconds, left = await seconds_until_nothing_allocated(stack, bound_s=30.0)
    assert left.nothing, left
    assert all_alive(stack) and not supervisor.gave_up.is_set()
    assert all(row["recovery_s"] < RECOVERY_BOUND_S for row in rows), rows
    return rows


async def test_each_kind_of_child_killed_comes_back_with_two_prefills(tiny_llama_dir, reference) -> None:
    with supervised(tiny_llama_dir, prefill=2) as (stack, supervisor):
        await _kill_each(stack, supervisor, reference, ["prefill", "decode", "kvxfer", "redis", "router"])


async def test_the_only_prefill_killed_comes_back(tiny_llama_dir, reference) -> None:
    with supervised(tiny_llama_dir, prefill=1) as (stack, supervisor):
        await _kill_each(stack, supervisor, reference, ["prefill"])


CRASH_TOKENS = [7, 7, 7, 42, 42, 42]  # a prompt holding these makes an instance abort (tests/e2e/hooks)


async def test_a_request_that_crashes_its_instance_is_not_retried_on_another(tiny_llama_dir, reference) -> None:
    env = {"DISTSERVE_TEST_CRASH_TOKENS": ",".join(map(str, CRASH_TOKENS)),  # read by hooks/sitecustomize.py
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "hooks"), os.environ.get("PYTHONPATH", "")])}
    with supervised(tiny_llama_dir, prefill=2, extra_env=env) as (stack, supervisor):
        pids = {p.name: p.process.pid for p in stack.procs}
        load = Load(stack.router_address, reference, http=f"http://{stack.config.host}:{stack.config.http_port}")
        running = asyncio.create_task(load.run())
        try:
            await asyncio.sleep(3.0)
            async with grpc.aio.insecure_channel(stack.router_address) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as crashed:
                    await router_pb2_grpc.RouterStub(channel).Generate(router_pb2.GenerateRequest(
                        prompt_token_ids=[1, *CRASH_TOKENS, 5], max_tokens=8, temperature=0.0), timeout=60).read()
            assert crashed.value.code() == grpc.StatusCode.INTERNAL, crashed.value
            killed = time.monotonic()
            await _first_served(stack.router_address, reference, killed)
            while not supervisor.restarted and time.monotonic() - killed < 10:
                await asyncio.sleep(0.1)
            crashed_proc = next(p for p in stack.procs if supervisor.restarted and p.name == supervisor.restarted[0][0])
            await _serving_again(crashed_proc.address, killed)  # its restart, before counting what is left
            await asyncio.sleep(2.0)
        finally:
            load.stop()
            await running
        # One prefill died, the one the request was sent to; the other one and every other process lived on.
        assert len(supervisor.restarted) == 1 and supervisor.restarted[0][0].startswith("prefill"), supervisor.restarted
        survivors = {p.name: p.process.pid for p in stack.procs if p.name != supervisor.restarted[0][0]}
        assert survivors == {name: pid for name, pid in pids.items() if name in survivors}
        outcomes = Counter(o[2] for o in load.outcomes)
        print({"fault": "a request that aborts its prefill", "load": dict(outcomes), "sse": dict(Counter(load.sse))},
              flush=True)
        # Streams batched in the fatal step fail with it (INTERNAL); the others are exact or were told to retry.
        assert set(outcomes) <= {"exact", "INTERNAL"} | RETRYABLE and outcomes["exact"] > 0, outcomes
        seconds, left = await seconds_until_nothing_allocated(stack, bound_s=30.0)
        assert left.nothing, left
        assert all_alive(stack) and not supervisor.gave_up.is_set()


def test_nothing_survives_a_killed_launcher(tiny_llama_dir, tmp_path) -> None:
    grpc_port, http_port = free_port(), free_port()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "services", "--log-level", "WARNING", "up", "--model", tiny_llama_dir, "--devices",
         "cpu:0,cpu:1", "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--planner-port", "0",
         "--num-blocks", "64"], stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert any(line.startswith("ready") for line in launcher.stdout)
        children = psutil.Process(launcher.pid).children(recursive=True)
        assert len(children) >= 4  # redis, kvxfer, prefill, decode, router
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [p.cmdline()[:4] for p in alive]
        # ... and its ports are free again for the next `distserve up`
        relaunch = subprocess.run([sys.executable, "-c", f"from services.common.net import bindable; "
                                   f"assert bindable('127.0.0.1', {grpc_port}) and bindable('127.0.0.1', {http_port})"])
        assert relaunch.returncode == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
