"""`distserve plan` prints the placement table and writes the attainment vs rate plot."""

import argparse

from services import planner_cli as cli


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_plan_prints_a_table_and_writes_a_png(tmp_path, capsys):
    png = tmp_path / "plan.png"
    code = _run(["plan", "--model", "opt-13b", "--nodes", "1", "--gpus-per-node", "4", "--num-requests", "300",
                 "--workers", "1", "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "prefill" in out and "decode" in out and "per GPU" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_reports_an_impossible_rate_as_an_error(capsys):
    code = _run(["plan", "--model", "opt-13b", "--rate", "1000", "--num-requests", "300", "--workers", "1",
                 "--plot", ""])
    assert code == 2
    assert "rate" in capsys.readouterr().out
