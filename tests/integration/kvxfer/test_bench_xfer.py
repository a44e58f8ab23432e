"""`distserve bench-xfer --quick` really runs: two kvxfer services and the raw ucxx baseline move bytes, and it
prints a figure for every path, block layout and size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from services.kvxfer.local import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.mark.long  # a whole bench-xfer run; the pulls themselves are tested in test_pulls/test_range_pulls
def test_quick_bench_prints_a_measured_row_per_path_layout_and_size() -> None:
    done = subprocess.run([sys.executable, "-m", "services", "bench-xfer", "--quick", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    sizes = sorted({r["bytes"] for r in rows})
    assert len(sizes) >= 2 and sizes[0] <= 65536
    cells = {(r["path"], r["blocks_layout"], r["bytes"]) for r in rows}
    assert cells == {(p, layout, size) for p in ("same-host", "cross-host") for layout in ("random", "contiguous")
                     for size in sizes}
    for r in rows:  # every figure measured, none left at zero
        assert min(r["gbps"], r["baseline_gbps"], r["ratio"], r["e2e_ms"], r["repeats"]) > 0, r
    assert "goal" in done.stderr  # the readable table and the goals go to stderr with --json

