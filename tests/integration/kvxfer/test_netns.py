"""Cross-host pulls between two network namespaces joined by a veth pair, as between two machines:
byte-exact, the bytes really cross the veth, and a sniffer on the veth sees the pool's KV there in clear
without `--encrypt-kv` and never with it. Skipped where namespaces cannot be made (not root, no
CAP_NET_ADMIN); the namespaces are deleted whatever happens."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from services.common.kv_layout import KVLayout
from services.kvxfer.local import ROOT, spawn_kvxfer
from tests.integration.kvxfer.conftest import block_bytes
from tests.integration.kvxfer.netns import NetnsUnavailable, VethPair, make_veth_pair, tx_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
LAYOUT = KVLayout(num_blocks=512, num_layers=2, block_size=16, num_kv_heads=2, head_dim=64)  # 32 KB blocks, 16 MB
PATTERN = b"<distserve-KV-on-the-wire>"


@pytest.fixture
def veth_pair() -> Iterator[VethPair]:
    try:
        pair = make_veth_pair()
    except NetnsUnavailable as e:
        pytest.skip(f"cannot make network namespaces here: {e}")
    yield pair
    pair.delete()


def _pulls(rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """Random block lists (one block, a few, and 5 MB: two packed frames) and a contiguous run (one
    1.5 MB range, sent unpacked); destination blocks disjoint, as the pulls partly run concurrently."""
    run = 48
    free_dst = rng.sample(range(run, LAYOUT.num_blocks), LAYOUT.num_blocks - run)
    pulls = [(rng.sample(range(LAYOUT.num_blocks), n), [free_dst.pop() for _ in range(n)]) for n in (1, 5, 160, 3, 8)]
    return [*pulls, (list(range(100, 100 + run)), list(range(run)))]


@pytest.mark.parametrize("encrypt", [False, True], ids=["clear", "encrypted"])
def test_pulls_between_two_namespaces_are_byte_exact_and_show_kv_on_the_wire_only_in_clear(
        encrypt, secret_file, veth_pair, make_pool) -> None:
    flags = ("--encrypt-kv", "true") if encrypt else ()
    src, dst = make_pool("p0", LAYOUT), make_pool("d0", LAYOUT, fill=False)
    half = LAYOUT.block_bytes // 2  # a pattern to look for on the wire in each block's first half, random bytes after
    blocks = src.tensor.view(LAYOUT.num_blocks, -1).view(torch.uint8)
    blocks[:, :half] = torch.from_numpy(np.resize(np.frombuffer(PATTERN, np.uint8), half))
    pulls = _pulls(random.Random(11))
    sent_before = tx_bytes(veth_pair.a)
    hosts = [spawn_kvxfer(*flags, host=h.address, netns=h.netns) for h in (veth_pair.a, veth_pair.b)]
    try:
        spec = {"a": hosts[0].address, "b": hosts[1].address, "layout": LAYOUT.to_dict(), "src_path": src.site.path,
                "dst_path": dst.site.path, "pulls": pulls, "sniff": veth_pair.b.device, "pattern": PATTERN.hex()}
        driver = subprocess.run(["ip", "netns", "exec", veth_pair.b.netns, sys.executable, "-m",
                                 "tests.integration.kvxfer.netns_driver", json.dumps(spec)],
                                cwd=ROOT, check=False, capture_output=True, text=True, timeout=90)
    finally:
        for host in hosts:
            host.stop()

    assert driver.returncode == 0, driver.stderr[-3000:]
    out = json.loads(driver.stdout.splitlines()[-1])
    results, sniffed = out["pulls"], out["sniffed"]
    pulled = sum(r["nbytes"] for r in results)
    assert [r["path"] for r in results] == ["cross-host"] * len(pulls)
    assert [r["nbytes"] for r in results] == [len(s) * LAYOUT.block_bytes for s, _ in pulls]
    for src_blocks, dst_blocks in pulls:
        assert block_bytes(dst, dst_blocks) == block_bytes(src, src_blocks)
    assert tx_bytes(veth_pair.a) - sent_before >= pulled
    assert sniffed["bytes"] >= pulled  # the sniffer saw the pulls' traffic
    if encrypt:
        assert sniffed["pattern_seen"] == 0
    else:  # most copies survive being cut into segments
        assert sniffed["pattern_seen"] > pulled // 2 // len(PATTERN) // 2
