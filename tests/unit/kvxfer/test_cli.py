"""`distserve kvxfer` flags become the service's config; unset flags leave env and defaults alone."""

import pytest

from services.cli import build_parser
from services.kvxfer.cli import config_from_args


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTSERVE_KVXFER_LEASE_TTL_S", "7.5")
    args = build_parser().parse_args(["kvxfer", "--port", "0", "--ucx-port", "51000", "--metrics-port", "9100"])
    config = config_from_args(args)
    assert (config.port, config.ucx_port, config.metrics_port, config.lease_ttl_s) == (0, 51000, 9100, 7.5)
    assert config.host == "127.0.0.1"


@pytest.mark.parametrize(("given", "on"), [(["--encrypt-kv", "true"], True), (["--encrypt-kv", "false"], False), ([], False)])
def test_kv_encryption_is_on_only_when_asked(given: list[str], on: bool) -> None:
    assert config_from_args(build_parser().parse_args(["kvxfer", *given])).encrypt_kv is on


def test_bench_flags() -> None:
    args = build_parser().parse_args(["bench-xfer", "--json", "--quick"])
    assert args.json and args.quick and args.device == "cpu" and callable(args.func)
    assert build_parser().parse_args(["bench-xfer", "--device", "cuda:1"]).device == "cuda:1"


@pytest.mark.parametrize("device", ["gpu", "cuda:99"])
def test_bench_refuses_a_device_it_cannot_use(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    from services.bench.xfer import run_bench

    assert run_bench(as_json=False, quick=True, device=device) == 2
    assert f"--device {device!r}" in capsys.readouterr().out
