"""`distserve up` takes the router's settings as flags (admission, SLOs, limits) and starts its router with them;
the ones it is not given stay unset, so the router's DISTSERVE_ROUTER_* variables and defaults apply as before."""

from __future__ import annotations

from services.cli import build_parser
from services.launcher.cli import config_from_args
from services.launcher.stack import Stack


def _router_args(argv: list[str]) -> list[str]:
    args = build_parser().parse_args(["up", *argv])
    return Stack(config_from_args(args, "/models/m")).router_args()


def test_router_settings_given_to_up_reach_the_router_command() -> None:
    cmd = _router_args(["--admission", "refuse", "--slo-ttft-ms", "250", "--slo-tpot-ms", "40", "--max-queued", "7"])
    flags = dict(zip(cmd[1::2], cmd[2::2]))
    assert flags["--admission"] == "refuse" and float(flags["--slo-ttft-ms"]) == 250.0
    assert float(flags["--slo-tpot-ms"]) == 40.0 and flags["--max-queued"] == "7"


def test_without_router_flags_the_router_command_is_what_up_wires() -> None:
    cmd = _router_args([])
    assert cmd[0] == "router"
    given = {flag for flag in cmd if flag.startswith("--")}
    assert given == {"--model", "--mode", "--host", "--grpc-port", "--http-port", "--redis-url"}


def test_up_keeps_its_own_flags_for_what_it_wires() -> None:
    args = build_parser().parse_args(["up", "--grpc-port", "6000", "--drain-grace-s", "3"])
    config = config_from_args(args, "/models/m")
    assert config.grpc_port == 6000 and config.drain_grace_s == 3.0 and config.router_settings == {}
