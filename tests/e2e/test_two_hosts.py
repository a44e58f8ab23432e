"""Prefill on one host, decode on another, each host with its own kvxfer: every served request's KV crosses
hosts over UCX, and the served tokens equal local generation. The hosts are two network namespaces joined by a
veth pair where they can be made (root), else two kvxfers on loopback (still a UCX pull between processes).
A pipeline prefill may have its second stage on the decode host, in that host's own /dev/shm."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator

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


LAYOUTS = {
    "prefill-tp1": {},
    # the decode (TP 1) pulls each layer's heads from the prefill's two rank pools on the other host (a
    # re-sharding pull over UCX)
    "prefill-tp2": {"prefill_tp": 2},
    # stage 0 on host A, stage 1 on the decode host B (its pool in B's /dev/shm, registered and leased at B's
    # kvxfer): the decode pulls stage 1's layers on its host and stage 0's across, each under its own lease
    "prefill-pp2-split": {"prefill_pp": 2, "remote_prefill_ranks": [1]},
}


@pytest.mark.parametrize("layout", [pytest.param(name, marks=() if name == "prefill-tp1" else pytest.mark.long)
                                    for name in LAYOUTS])
def test_tokens_decoded_from_kv_that_crossed_hosts_equal_local_generation(veth_pair, tiny_llama_dir: str,
                                                                          layout: str, tmp_path) -> None:
    rng = random.Random(5)
    workload = [(" ".join(rng.choices(WORDS, k=rng.randint(3, 60))), rng.randint(8, 16)) for _ in range(8)]
    spec = {"model": tiny_llama_dir, "workload": workload, **LAYOUTS[layout]}
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
    # Every request that reached decode pulled its KV through the decode host's kvxfer, none on the source host.
    decoded = sum(1 for tokens in served["tokens"] if len(tokens) > 1)
    assert served["decode_host"]["pulls_ok"] >= decoded > 0 and served["decode_host"]["pulls_failed"] == 0
    assert served["source"]["pulls_ok"] == 0
    # Nothing leaked: every lease at either kvxfer ended, every block back in every instance's pool.
    assert served["source"]["live_leases"] == served["decode_host"]["live_leases"] == 0
    assert served["blocks_used"] == [0] * len(served["blocks_used"])
    split = "remote_prefill_ranks" in LAYOUTS[layout]
    if split:  # stage 1's pool was served by the decode host's kvxfer
        assert served["decode_host"]["pulls_ok"] >= 2 * decoded  # a local and a cross-host pull per request
        if veth_pair is not None:  # from B's own /dev/shm, out of A's sight
            shm = served["decode_shm"]
            assert any(f.endswith(".rank1") for f in shm["files"]) and shm["seen_here"] == [], shm
    if veth_pair is not None:  # and the bytes went over the veth pair (stage 0's half of the layers, when split)
        crossed = served["decode_host"]["bytes_pulled"] // (2 if split else 1)
        assert tx_bytes(veth_pair.a) - sent_before >= crossed
