"""`distserve bench-security` on the tiny model: both sides start, serve and pull, and every figure is printed
for both."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]
ROWS = ("router: ms per token", "direct prefill+decode", "router adds per token", "same-host pull 64 KB",
        "same-host pull 16 MB", "cross-host pull 64 KB", "cross-host pull 16 MB", "unary kvxfer RPC")


def test_one_round_prints_every_figure_off_and_on(tiny_llama_dir):
    run = subprocess.run([sys.executable, "-m", "services", "--log-level", "ERROR", "bench-security", "--model",
                          tiny_llama_dir, "--rounds", "1", "--tokens", "6", "--rpc-calls", "5"],
                         capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    for row in ROWS:
        (line,) = [line for line in lines if row in line]
        cells = [cell.strip() for cell in line.split("│") if cell.strip()]
        assert cells[1].endswith(("ms", "us")) and cells[2].endswith(("ms", "us")), line  # figure, off, on, on/off
        if row != "router adds per token":  # a difference of means: on a loaded host either sign
            assert float(cells[3]) > 0, line
