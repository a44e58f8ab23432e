"""`python -m benchmarks.engine --json` prints one JSON object with the figures and ratios the README quotes."""

from __future__ import annotations

import json

import pytest

from benchmarks.engine import main, parse_layouts


def test_bench_engine_json(tiny_llama_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", tiny_llama_dir, "--device", "cpu", "--json"]) == 0  # --device cpu, not cpu:N: the test must not pin pytest to one core
    result = json.loads(capsys.readouterr().out)
    assert result["prefill"]["tokens"] == 512 and result["prefill"]["tokens_per_s"] > 0
    assert [d["batch"] for d in result["decode"]] == [1, 8, 32]
    assert all(d["tokens_per_s"] > 0 and d["bytes_per_step"] > 0 for d in result["decode"])
    assert result["matmul_gflops"] > 0 and result["memcpy_gb_per_s"] > 0
    assert result["prefill_flops_ratio"] > 0 and result["decode_bandwidth_ratio"] == result["decode"][0]["bandwidth_ratio"]


def test_bench_engine_devices_json(tiny_llama_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An instance per device, each row with its speed-ups over the first (here the same device twice, unpinned)."""
    assert main(["--model", tiny_llama_dir, "--devices", "cpu,cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["devices"] for r in rows] == [["cpu"], ["cpu"]] and [r["threads"] for r in rows] == [1, 1]
    assert rows[0]["prefill_speedup"] == rows[0]["decode_b1_speedup"] == 1.0
    assert rows[1]["decode_b8_speedup"] == pytest.approx(rows[0]["decode_b8_ms"] / rows[1]["decode_b8_ms"], abs=0.01)
    assert all(len(r["load_1min"]) == 2 for r in rows)


def test_layouts_may_name_a_moe_instances_expert_groups() -> None:
    assert parse_layouts("1x1,2x1ep1,2x1ep2,1x2") == [(1, 1, 0), (2, 1, 1), (2, 1, 2), (1, 2, 0)]
    with pytest.raises(SystemExit, match="TPxPP\\[epE\\]"):
        parse_layouts("2x1e1")
