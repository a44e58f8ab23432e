"""Prefill on one host, decode on another, each host with its own kvxfer: every served request's KV crosses
hosts over UCX, and the served tokens equal local generation. The hosts are two network namespaces joined by a
veth pair where they can be made (root), else two kvxfers on loopback (still a UCX pull between processes).
A pipeline prefill may have its second stage on the decode host, in that host's own /dev/shm, and a pipeline
decode its second stage on the prefill host."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.engine import EngineConfig, LLMEngine
from services.kvxfer.local import ROOT
from tests.integration.kvxfer.netns import (
    NetnsUnavailable,
    VethPair,
    make_veth_pair,
    tx_bytes,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
WORDS = "prefill here decode there and the cache crosses the wire between two hosts".split()


@pytest.fixture
def veth_pair() -> Iterator[VethPair | None]:
    """Two namespaces, or None where they cannot be made (the test then runs both hosts on loopback)."""
    try:
        pair = make_veth_pair()
    except NetnsUnavailable:
        yield None
        return
    yield pair
    pair.delete()


def _reference(model: str, workload: list[tuple[str, int]]) -> list[list[int]]:
    tokenizer = load_tokenizer(model)
    engine = LLMEngine(EngineConfig(model, policy="colocated", num_blocks=256))
    try:
        return engine.generate([tokenizer.encode(p) for p, _ in workload],
                               [SamplingParams(max_tokens=m, temperature=0.0) for _, m in workload])
    finally:
        engine.close()


class Layout(NamedTuple):
    spec: dict
    pulls_b: int     # pulls per decoded request at the decode host's kvxfer (B)
    pulls_a: int     # and at the source host's (A)
    crossed_b: int   # 1 / the share of B's pulled bytes that crossed from A


LAYOUTS = {
    "prefill-tp1": Layout({}, 1, 0, 1),
    # the decode (TP 1) pulls each layer's heads from the prefill's two rank pools on the other host (a
    # re-sharding pull over UCX)
    "prefill-tp2": Layout({"prefill_tp": 2}, 1, 0, 1),
    # stage 0 on host A, stage 1 on the decode host B (its pool in B's /dev/shm, registered and leased at B's
    # kvxfer): the decode pulls stage 1's layers on its host and stage 0's across, each under its own lease
    "prefill-pp2-split": Layout({"prefill_pp": 2, "remote_prefill_ranks": [1]}, 2, 0, 2),
    # decode stage 0 on B, stage 1 on host A (its pool in A's /dev/shm, registered at A's kvxfer): B's kvxfer
    # pulls stage 0's layers across, A's stage 1's locally, both from the prefill's one lease
    "decode-pp2-split": Layout({"decode_pp": 2, "remote_decode_ranks": [1]}, 1, 1, 1),
    # both split, crosswise: each kvxfer pulls its decode stage's layers from the other host's prefill stage
    "both-pp2-split": Layout({"prefill_pp": 2, "decode_pp": 2, "remote_prefill_ranks": [1],
                              "remote_decode_ranks": [1]}, 1, 1, 1),
}


@pytest.mark.parametrize("layout", [pytest.param(name, marks=() if name == "prefill-tp1" else pytest.mark.long)
                                    for name in LAYOUTS])
def test_tokens_decoded_from_kv_that_crossed_hosts_equal_local_generation(veth_pair, tiny_llama_dir: str,
                                                                          layout: str, tmp_path) -> None:
    rng = random.Random(5)
    workload = [(" ".join(rng.choices(WORDS, k=rng.randint(3, 60))), rng.randint(8, 16)) for _ in range(8)]
    expect = LAYOUTS[layout]
    spec = {"model": tiny_llama_dir, "workload": workload, **expect.spec}
    env = dict(os.environ)
    if veth_pair is None:
        spec |= {"host": "127.0.0.1", "decode_host": "127.0.0.1"}
        enter: list[str] = []
    else:
        spec |= {"host": veth_pair.a.address, "decode_host": veth_pair.b.address, "decode_netns": veth_pair.b.netns,
                 "decode_shm": str(tmp_path), "decode_env": {"GLOO_SOCKET_IFNAME": veth_pair.b.device}}
        env["GLOO_SOCKET_IFNAME"] = veth_pair.a.device  # a stage's hidden states cross the veth pair too
        enter = ["ip", "netns", "exec", veth_pair.a.netns]
        sent_before = tx_bytes(veth_pair.a)

    driver = subprocess.run([*enter, sys.executable, "-m", "tests.e2e.two_hosts_driver", json.dumps(spec)],
                            cwd=ROOT, check=False, capture_output=True, text=True, timeout=360, env=env)

    assert driver.returncode == 0, driver.stderr[-3000:]
    served = json.loads(driver.stdout.splitlines()[-1])
    assert served["tokens"] == _reference(tiny_llama_dir, workload)
    # Every request that reached decode pulled its KV into each decode pool through that pool's host's kvxfer.
    decoded = sum(1 for tokens in served["tokens"] if len(tokens) > 1)
    b, a = served["decode_host"], served["source"]
    assert decoded > 0 and b["pulls_failed"] == a["pulls_failed"] == 0
    assert b["pulls_ok"] >= expect.pulls_b * decoded
    assert a["pulls_ok"] >= expect.pulls_a * decoded
    if not expect.pulls_a:
        assert a["pulls_ok"] == 0  # none on the source host
    # Nothing leaked: every lease at either kvxfer ended, every block back in every instance's pool.
    assert a["live_leases"] == b["live_leases"] == 0
    assert served["blocks_used"] == [0] * len(served["blocks_used"])
    if veth_pair is not None:
        # a stage on the other host than its rank 0 has its pool in that host's /dev/shm only
        shm = served["decode_shm"]
        for role, away, home in (("prefill", shm["files"], shm["here"]), ("decode", shm["here"], shm["files"])):
            if f"remote_{role}_ranks" in expect.spec:
                assert _rank1(role, away) and not _rank1(role, home), shm
            else:
                assert not _rank1(role, away), shm
        assert shm["seen_here"] == [], shm  # A sees nothing of B's /dev/shm
        # and the bytes went over the veth pair (stage 0's half of the layers, when prefill stage 1 is on B)
        assert tx_bytes(veth_pair.a) - sent_before >= b["bytes_pulled"] // expect.crossed_b


def _rank1(role: str, files: list[str]) -> list[str]:
    """The pool files of rank 1 of the stack's `role` instance among `files`."""
    return [f for f in files if f"{role}-" in f and f.endswith(".rank1")]
