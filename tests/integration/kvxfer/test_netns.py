"""Cross-host pulls between two network namespaces joined by a veth pair, as between two machines:
byte-exact, and the bytes really cross the veth. Skipped where namespaces cannot be made (not root,
no CAP_NET_ADMIN); the namespaces are deleted whatever happens."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator

import pytest

from services.common.kv_layout import KVLayout
from services.kvxfer.local import ROOT, LocalKVXfer, spawn_kvxfer
from tests.integration.kvxfer.conftest import block_bytes
from tests.integration.kvxfer.netns import NetnsUnavailable, VethPair, make_veth_pair, tx_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
LAYOUT = KVLayout(num_blocks=512, num_layers=2, block_size=16, num_kv_heads=2, head_dim=64)  # 32 KB blocks, 16 MB


@pytest.fixture
def veth_pair() -> Iterator[VethPair]:
    try:
        pair = make_veth_pair()
    except NetnsUnavailable as e:
        pytest.skip(f"cannot make network namespaces here: {e}")
    yield pair
    pair.delete()


@pytest.fixture
def kvxfers(veth_pair: VethPair) -> Iterator[tuple[LocalKVXfer, LocalKVXfer]]:
    """kvxfer A in namespace A, kvxfer B in namespace B (stopped before the namespaces go)."""
    hosts = [spawn_kvxfer(host=h.address, netns=h.netns) for h in (veth_pair.a, veth_pair.b)]
    yield hosts[0], hosts[1]
    for host in hosts:
        host.stop()


def _pulls(rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """Random block lists (one block, a few, and 5 MB: two packed frames) and a contiguous run (one
    1.5 MB range, sent unpacked); destination blocks disjoint, as the pulls partly run concurrently."""
    run = 48
    free_dst = rng.sample(range(run, LAYOUT.num_blocks), LAYOUT.num_blocks - run)
    pulls = [(rng.sample(range(LAYOUT.num_blocks), n), [free_dst.pop() for _ in range(n)]) for n in (1, 5, 160, 3, 8)]
    return [*pulls, (list(range(100, 100 + run)), list(range(run)))]


def test_pulls_between_two_namespaces_are_byte_exact(veth_pair, kvxfers, make_pool) -> None:
    host_a, host_b = kvxfers
    src, dst = make_pool("p0", LAYOUT), make_pool("d0", LAYOUT, fill=False)
    pulls = _pulls(random.Random(11))
    spec = {"a": host_a.address, "b": host_b.address, "layout": LAYOUT.to_dict(), "src_path": src.path,
            "dst_path": dst.path, "pulls": pulls}
    sent_before = tx_bytes(veth_pair.a)

    driver = subprocess.run(["ip", "netns", "exec", veth_pair.b.netns, sys.executable, "-m",
                             "tests.integration.kvxfer.netns_driver", json.dumps(spec)],
                            cwd=ROOT, check=False, capture_output=True, text=True, timeout=90)

    assert driver.returncode == 0, driver.stderr[-3000:]
    results = json.loads(driver.stdout.splitlines()[-1])
    assert [r["path"] for r in results] == ["cross-host"] * len(pulls)
    assert [r["nbytes"] for r in results] == [len(s) * LAYOUT.block_bytes for s, _ in pulls]
    for src_blocks, dst_blocks in pulls:
        assert block_bytes(dst, dst_blocks) == block_bytes(src, src_blocks)
    assert tx_bytes(veth_pair.a) - sent_before >= sum(r["nbytes"] for r in results)
