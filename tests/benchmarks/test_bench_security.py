"""`python -m benchmarks.security_cost` on the tiny model: both sides start, serve and pull, and every figure is printed
for both."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow]
ROWS = ("router: ms per token", "direct prefill+decode", "router adds per token", "same-host pull 64 KB",
        "same-host pull 16 MB", "cross-host pull 64 KB", "cross-host pull 16 MB", "unary kvxfer RPC")


@pytest.mark.long
@pytest.mark.timeout(600)
def test_two_rounds_print_every_figure_off_and_on_with_its_interval(tiny_llama_dir):
    run = subprocess.run([sys.executable, "-m", "benchmarks.security_cost", "--model",
                          tiny_llama_dir, "--rounds", "2", "--tokens", "6", "--rpc-calls", "5"],
                         capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    for row in ROWS:
        (line,) = [line for line in lines if row in line]
        cells = [cell.strip() for cell in line.split("│") if cell.strip()]
        assert cells[1].endswith(("ms", "us")) and cells[2].endswith(("ms", "us")), line  # figure, off, on, on/off
        median, low, high = (float(x.strip("[],")) for x in cells[3].split()[:3])  # on/off [95% interval]
        assert low <= median <= high, line
        if row != "router adds per token":  # a difference (on - off): on a loaded host either sign
            assert median > 0, line


@pytest.mark.timeout(120)
def test_rpc_parts_prints_every_variant_with_its_ratio_to_its_baseline():
    from benchmarks.rpc_parts import VARIANTS

    run = subprocess.run([sys.executable, "-m", "benchmarks.rpc_parts",
                          "--rounds", "2", "--rpc-calls", "3"], capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stderr[-3000:]
    for variant in VARIANTS:
        (line,) = [line for line in run.stdout.splitlines() if line.startswith(f"│ {variant.name} ")]
        cells = [cell.strip() for cell in line.split("│") if cell.strip()]
        if variant.baseline == variant.name:  # variant, wall, client CPU, server CPU
            assert len(cells) == 4 and all(float(cell) > 0 for cell in cells[1:]), line
        else:  # variant, wall, wall ratio [interval], client CPU, server CPU, CPU ratio [interval], over
            assert cells[2].count("[") == 1 and cells[5].count("[") == 1 and cells[6] == variant.baseline, line
            assert all(float(cell) > 0 for cell in (cells[1], cells[3], cells[4])), line
