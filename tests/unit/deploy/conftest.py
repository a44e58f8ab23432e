"""Compose documents under test: deploy/docker-compose.yml and files the emitter writes, one document per host."""

from __future__ import annotations

import json

import pytest
import yaml

from services.cli import main
from services.planner.placement import Parallel
from tests.unit.deploy.deploy_cases import ROOT, emitted

SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"


@pytest.fixture(scope="session")
def compose_schema() -> dict:
    if not SCHEMA.exists():
        pytest.skip(f"no Compose Specification schema at {SCHEMA}")
    return json.loads(SCHEMA.read_text())


@pytest.fixture(scope="session")
def plan_cli_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """What `distserve plan --emit compose` writes for one 4-GPU host (a real placement search)."""
    out = tmp_path_factory.mktemp("emitted")
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--model", "opt-13b", "--nodes", "1", "--gpus-per-node", "4", "--input-len", "256",
              "--output-len", "64", "--num-requests", "50", "--workers", "1", "--plot", "",
              "--emit", "compose", "--out", str(out)])
    assert exit_.value.code == 0
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(out.glob("docker-compose.node*.yml"))}


HOST_DOCS = ["deploy/docker-compose.yml", "one host", "two hosts: node0", "two hosts: node1", "distserve plan --emit"]


@pytest.fixture(params=HOST_DOCS)
def host_doc(request: pytest.FixtureRequest) -> dict:
    """One host's compose document."""
    name = request.param
    if name == "deploy/docker-compose.yml":
        return yaml.safe_load((ROOT / name).read_text())
    if name == "one host":
        return emitted(1, Parallel(2, 1), 2, Parallel(1, 1), 4)["docker-compose.node0.yml"]
    if name.startswith("two hosts"):
        files = emitted(2, Parallel(4, 1), 2, Parallel(2, 1), 4)
        return files[f"docker-compose.{name.split(': ')[1]}.yml"]
    (doc,) = request.getfixturevalue("plan_cli_files").values()
    return doc
