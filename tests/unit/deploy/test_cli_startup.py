"""Health checks run `distserve health` every few seconds in every container, so the CLI must start without
importing torch (seconds of CPU each time)."""

import subprocess
import sys

from tests.unit.deploy.deploy_cases import ROOT


def test_the_cli_parses_every_command_without_importing_torch() -> None:
    code = ("import sys; from services.cli import build_parser; "
            "build_parser().parse_args(['health', '127.0.0.1:1']); "
            "build_parser().parse_args(['prefill', '--device', 'cuda:0']); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0, "building the CLI imports torch"
