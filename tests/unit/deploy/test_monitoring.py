"""Prometheus and Grafana beside the compose files: the committed files are what the generator writes, the
monitoring compose file is valid Compose, Prometheus scrapes every metrics endpoint the hosts' files open (and
promtool accepts the config), and every dashboard query names metrics the services define."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from services.deploy.compose_monitoring import FILE, monitoring_files
from services.deploy.observability import PANELS, dashboard
from tests.unit.deploy.deploy_cases import ADDRESSES, ROOT, emitted
from tests.unit.deploy.test_compose_files import parse


def _generator():
    spec = importlib.util.spec_from_file_location("gen_compose", ROOT / "scripts" / "gen_compose.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_committed_monitoring_files_are_what_the_generator_writes() -> None:
    for relative, text in _generator().render_monitoring().items():
        assert (ROOT / "deploy" / relative).read_text() == text, f"run scripts/gen_compose.py ({relative})"


def test_the_monitoring_file_is_valid_compose(compose_schema: dict) -> None:
    jsonschema.validate(yaml.safe_load((ROOT / "deploy" / FILE).read_text()), compose_schema)


def _metrics_endpoints(docs: dict[str, dict]) -> set[str]:
    """host:port of every metrics endpoint the hosts' compose files open (the planner's on its REST port)."""
    found = set()
    for doc in docs.values():
        for service in doc["services"].values():
            if service.get("command", [None])[0] != "distserve":
                continue
            args = parse(service["command"])
            port = args.port if service["command"][1] == "planner" else getattr(args, "metrics_port", 0)
            if port:
                found.add(f"{args.host if args.host != '0.0.0.0' else '127.0.0.1' if len(docs) == 1 else ADDRESSES[0]}:{port}")
    return found


@pytest.mark.parametrize("nodes", [1, 2])
def test_prometheus_scrapes_every_metrics_endpoint_of_the_hosts(nodes: int, tmp_path: Path) -> None:
    from services.deploy.compose import named_instances
    from services.planner.placement import Cluster, Parallel, pack

    placement = pack(Cluster(nodes=nodes, gpus_per_node=8), Parallel(2, 1), 2, Parallel(1, 1), 4)
    addresses = ADDRESSES[:nodes] if nodes > 1 else ("127.0.0.1",)
    files = monitoring_files(named_instances(placement), addresses)
    config = yaml.safe_load(files["prometheus/prometheus.yml"])
    scraped = {t for job in config["scrape_configs"] for static in job["static_configs"] for t in static["targets"]}
    assert scraped == _metrics_endpoints(emitted(nodes, Parallel(2, 1), 2, Parallel(1, 1), 4))
    if shutil.which("promtool"):
        (tmp_path / "prometheus.yml").write_text(files["prometheus/prometheus.yml"])
        check = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_every_dashboard_query_names_a_metric_the_services_define() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "services").rglob("*.py"))
    defined = set(re.findall(r'"(distserve_\w+)"', source))
    for panel in PANELS:
        for _, expr in panel.targets:
            for name in re.findall(r"distserve_\w+", expr):
                # a histogram's series end _bucket, _sum, _count; a counter's _total, whether its name has it or not
                assert {name, re.sub(r"_(bucket|sum|count|total)$", "", name)} & defined, (panel.title, name)
    board = dashboard()
    assert len(board["panels"]) == len(PANELS) and len({p["id"] for p in board["panels"]}) == len(PANELS)
    committed = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "distserve.json").read_text())
    assert committed == board
