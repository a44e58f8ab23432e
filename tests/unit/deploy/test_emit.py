"""The compose emitter and the compose actuator: one file per host sharing the first host's Redis, GPUs as
planned, and replans that keep the services still wanted."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
import yaml

from services.deploy.cli import emit
from services.deploy.compose import compose_files, named_instances
from services.deploy.compose_actuator import ComposeActuator
from services.planner.actuation import apply_placement
from services.planner.placement import Cluster, Parallel, pack, pack_units
from tests.unit.deploy.deploy_cases import ADDRESSES, ROOT, emitted


def test_committed_compose_file_is_what_the_emitter_writes() -> None:
    spec = importlib.util.spec_from_file_location("gen_compose", ROOT / "scripts" / "gen_compose.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "deploy" / "docker-compose.yml").read_text() == gen.render(), "run scripts/gen_compose.py"


def test_hosts_share_the_first_hosts_redis_and_their_own_kvxfer() -> None:
    files = emitted(2, Parallel(4, 1), 2, Parallel(2, 1), 4)
    assert list(files) == ["docker-compose.node0.yml", "docker-compose.node1.yml"]
    head, other = (doc["services"] for doc in files.values())
    assert {"redis", "router", "planner", "kvxfer"} <= head.keys()
    assert not {"redis", "router", "planner"} & other.keys() and "kvxfer" in other
    for services, address in ((head, ADDRESSES[0]), (other, ADDRESSES[1])):
        workers = [s for name, s in services.items() if name.startswith(("prefill-", "decode-"))
                   and s["command"][1] != "rank"]  # TP/PP ranks other than 0 only join their rank 0
        assert workers
        for worker in workers:
            assert worker["environment"]["DISTSERVE_REDIS_URL"] == f"rediss://distserve@{ADDRESSES[0]}:6379/0"
            assert worker["environment"]["DISTSERVE_KVXFER"] == f"{address}:50061"
            assert worker["command"][worker["command"].index("--host") + 1] == address


def test_each_rank_reserves_the_gpu_of_its_plan() -> None:
    placement = pack_units(Cluster(nodes=2, gpus_per_node=8), Parallel(2, 1), Parallel(1, 1), cross=1, units=4)
    files = compose_files(named_instances(placement), ADDRESSES)
    for inst in placement.instances:
        for rank, (node, gpu) in enumerate((s.node, g) for s in inst.stages for g in s.gpus):
            name = f"{inst.role}-{inst.index}" + (f"-rank{rank}" if rank else "")
            service = files[f"docker-compose.node{node}.yml"]["services"][name]
            (device,) = service["deploy"]["resources"]["reservations"]["devices"]
            assert device["device_ids"] == [str(gpu)]


def test_an_instance_spanning_hosts_has_its_ranks_on_their_stages_hosts() -> None:
    placement = pack(Cluster(nodes=2, gpus_per_node=4), Parallel(4, 2), 1, Parallel(1, 1), 0)
    files = compose_files(named_instances(placement), ADDRESSES)
    node0, node1 = (doc["services"] for doc in files.values())
    rank0 = node0["prefill-0"]["command"]
    rendezvous = rank0[rank0.index("--rendezvous") + 1]
    assert rendezvous.startswith(ADDRESSES[0]) and rank0[rank0.index("--tp") + 1] == "4"
    assert sorted(n for n in node0 if n.startswith("prefill-0-rank")) == [f"prefill-0-rank{r}" for r in (1, 2, 3)]
    assert sorted(n for n in node1 if n.startswith("prefill-0-rank")) == [f"prefill-0-rank{r}" for r in (4, 5, 6, 7)]
    for name in ("prefill-0-rank4", "prefill-0-rank7"):
        command = node1[name]["command"]
        assert command[command.index("--rendezvous") + 1] == rendezvous


def read(out: Path) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text())["services"] for p in sorted(out.glob("docker-compose.node*.yml"))}


def test_replanning_into_the_same_folder_keeps_services_still_wanted(tmp_path: Path) -> None:
    cluster = Cluster(nodes=2, gpus_per_node=8)
    apply_placement(ComposeActuator(tmp_path, ADDRESSES), pack(cluster, Parallel(4, 1), 2, Parallel(1, 1), 4))
    before = read(tmp_path)
    grown = apply_placement(ComposeActuator(tmp_path, ADDRESSES), pack(cluster, Parallel(4, 1), 2, Parallel(1, 1), 8))
    after = read(tmp_path)
    assert len(grown.kept) == 6 and len(grown.started) == 4 and not grown.stopped
    for host, services in before.items():
        for name, service in services.items():
            assert after[host][name] == service, f"{name} would be recreated"
    shrunk = apply_placement(ComposeActuator(tmp_path, ADDRESSES), pack(cluster, Parallel(4, 1), 1, Parallel(1, 1), 2))
    remaining = {name for services in read(tmp_path).values() for name in services}
    assert len(shrunk.stopped) == 7 and not set(shrunk.stopped) & remaining


def test_emit_says_how_to_apply_and_where_the_ranks_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    placement = pack(Cluster(nodes=2, gpus_per_node=8), Parallel(2, 1), 2, Parallel(1, 1), 6)
    args = argparse.Namespace(out=str(tmp_path), nodes=2, node_addresses=",".join(ADDRESSES))
    assert emit(args, placement) == 0
    printed = capsys.readouterr().out
    assert "prefill instances (tp 2 × pp 1): rank 0 is the instance's service" in printed
    assert "decode instances" not in printed
    for node, address in enumerate(ADDRESSES):
        assert f"on {address}: docker compose -f {tmp_path}/docker-compose.node{node}.yml up -d" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docker-compose.monitoring.yml", "docker-compose.node0.yml",
                                                          "docker-compose.node1.yml", "grafana", "prometheus"]
    assert f"monitoring (first host): docker compose -f {tmp_path}/docker-compose.monitoring.yml up -d" in printed


def test_emit_refuses_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    placement = pack(Cluster(nodes=2, gpus_per_node=8), Parallel(1, 1), 2, Parallel(1, 1), 2)
    assert emit(argparse.Namespace(out=str(tmp_path), nodes=2, node_addresses="10.0.0.1"), placement) == 2
    assert "1 addresses for 2 nodes" in capsys.readouterr().out
    assert emit(argparse.Namespace(out=None, nodes=2, node_addresses=""), placement) == 2
    assert "needs --out" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_a_plan_with_fewer_expert_groups_than_tp_launches_them_and_a_new_ep_replaces_the_instance(
        tmp_path: Path) -> None:
    """EP 2 inside TP 4 (each expert split over a group of 2 GPUs): rank 0 runs with --tp 4 --ep 2; EP is part of
    an instance's shape, so replanning to EP = TP replaces the prefill instance and keeps the decode ones."""
    cluster, addresses = Cluster(nodes=1, gpus_per_node=8), ADDRESSES[:1]
    apply_placement(ComposeActuator(tmp_path, addresses), pack(cluster, Parallel(4, 1, 2), 1, Parallel(2, 1, 1), 2))
    services = read(tmp_path)["docker-compose.node0.yml"]

    def layout(name: str) -> list[str]:
        command = services[name]["command"]
        return command[command.index("--tp") : command.index("--rendezvous")]

    assert layout("prefill-0") == ["--tp", "4", "--pp", "1", "--ep", "2"]
    assert layout("decode-0") == layout("decode-1") == ["--tp", "2", "--pp", "1", "--ep", "1"]
    done = apply_placement(ComposeActuator(tmp_path, addresses), pack(cluster, Parallel(4, 1, 4), 1, Parallel(2, 1, 1), 2))
    assert (len(done.started), len(done.stopped), sorted(done.kept)) == (1, 1, ["decode-0", "decode-1"])
