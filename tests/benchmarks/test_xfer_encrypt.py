"""`python -m benchmarks.xfer_encrypt --quick` really runs: it prints encryption off, on and on/off per block
layout and size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from services.kvxfer.local import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.mark.long  # two pairs of kvxfers and every size twice over
def test_quick_encrypt_bench_prints_off_on_and_their_ratio_per_layout_and_size() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.xfer_encrypt", "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert {(r["blocks_layout"], r["bytes"]) for r in rows} == {(layout, size) for layout in ("random", "contiguous")
                                                                for size in (1 << 20, 16 << 20)}
    for r in rows:
        assert min(r["off_gbps"], r["on_gbps"], r["off_e2e_ms"], r["on_e2e_ms"], r["on_off"]) > 0, r
    assert "on/off" in done.stderr
