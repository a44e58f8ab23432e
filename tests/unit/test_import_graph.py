"""No import runs back up a layer of pyproject's layers contract, and no modules import each other in a circle
(`python -m benchmarks.import_graph`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_upward_arrows_and_no_circles() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.import_graph", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    graph = json.loads(done.stdout)
    assert graph["upward_arrows"] == [] and graph["circles"] == [], graph
