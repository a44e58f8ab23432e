"""KV encryption on cross-host pulls (`--encrypt-kv`): block and re-sharding pulls stay byte-exact; two kvxfers
that disagree refuse the pull (FAILED_PRECONDITION) and the source keeps the lease; without a deployment secret
a kvxfer with encryption on does not start."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import grpc
import pytest
import torch

from services.common.auth import instance_principal
from services.common.kv_layout import HEAD_AXIS, KVLayout
from services.common.pool_site import PoolSite
from services.common.secret import SECRET_ENV
from services.common.span import Span
from services.decode.reshard import reshard_copies
from services.kvxfer.client import KVXferClient, PullFailed
from services.kvxfer.local import ROOT
from tests.integration.kvxfer.conftest import block_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
ON = ("--encrypt-kv", "true")
LAYOUT = KVLayout(num_blocks=256, num_layers=2, block_size=16, num_kv_heads=2, head_dim=64)  # 32 KB blocks, 8 MB
HALF = KVLayout(LAYOUT.num_blocks, LAYOUT.num_layers, LAYOUT.block_size, 1, LAYOUT.head_dim)  # one KV head of two


async def test_encrypted_cross_host_pulls_are_byte_exact(secret_file, start_kvxfer, make_pool) -> None:
    host_a, host_b = await start_kvxfer(*ON), await start_kvxfer(*ON)
    a, b = KVXferClient(host_a.address, instance_principal("p0")), KVXferClient(host_b.address, instance_principal("d0"))
    src, dst = make_pool("p0", LAYOUT), make_pool("d0", LAYOUT, fill=False)
    ranks = [make_pool("r0", HALF), make_pool("r0.r1", HALF)]
    try:
        await a.register_pool("p0", src.site)
        await b.register_pool("d0", dst.site)
        rng = random.Random(3)
        # scattered blocks (packed frames), a 5 MB contiguous run (one range, cut into two chunks), one block
        for src_blocks, dst_blocks in ((rng.sample(range(256), 200), rng.sample(range(256), 200)),
                                       (list(range(10, 170)), list(range(90, 250))), ([63], [7])):
            handle = await a.create_lease("p0", src_blocks, num_tokens=len(src_blocks) * LAYOUT.block_size)
            result = await b.pull(handle, "d0", dst_blocks, checksum=True)
            assert result.path == "cross-host"
            assert block_bytes(dst, dst_blocks) == block_bytes(src, src_blocks)

        r = KVXferClient(host_a.address, instance_principal("r0"))
        await r.register_pool("r0", ranks[0].site)
        await r.register_pool("r0.r1", ranks[1].site, owner="r0")
        src_blocks, dst_blocks = [5, 6, 7, 40, 2], [9, 10, 30, 31, 0]
        handle = await r.create_lease("r0", src_blocks, num_tokens=70)
        shards = {"r0": PoolSite(HALF, Span(0, 2), Span(0, 1)), "r0.r1": PoolSite(HALF, Span(0, 2), Span(1, 1))}
        copies = reshard_copies(shards, src_blocks, {"d0": PoolSite(LAYOUT, Span(0, 2), Span(0, 2))}, dst_blocks)
        result = await b.pull_ranges(handle, copies, checksum=True)
        assert result.path == "cross-host"
        want = torch.cat([ranks[0].tensor[src_blocks], ranks[1].tensor[src_blocks]], dim=HEAD_AXIS)
        assert torch.equal(dst.tensor[dst_blocks], want)
        await r.close()
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("encrypting", ["source", "destination"])
async def test_kvxfers_that_disagree_on_encryption_refuse_the_pull(encrypting, secret_file, start_kvxfer,
                                                                   make_pool) -> None:
    host_a = await start_kvxfer(*(ON if encrypting == "source" else ()))
    host_b = await start_kvxfer(*(ON if encrypting == "destination" else ()))
    a, b = KVXferClient(host_a.address, instance_principal("p0")), KVXferClient(host_b.address, instance_principal("d0"))
    src, dst = make_pool("p0"), make_pool("d0", fill=False)
    try:
        await a.register_pool("p0", src.site)
        await b.register_pool("d0", dst.site)
        handle = await a.create_lease("p0", [1, 2, 3], num_tokens=40, ttl_s=30)
        with pytest.raises(PullFailed) as failed:
            await b.pull(handle, "d0", [4, 5, 6])
        assert failed.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert "KV encryption differs" in str(failed.value) and "--encrypt-kv" in str(failed.value)
        assert not dst.tensor[[4, 5, 6]].any()
        assert (await a.stats()).live_leases == 1  # the source keeps it: nothing was sent
    finally:
        await a.close()
        await b.close()


def test_encryption_without_a_deployment_secret_does_not_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    done = subprocess.run([sys.executable, "-m", "services.kvxfer", "--port", "0", *ON], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "--encrypt-kv needs the deployment secret" in done.stderr
