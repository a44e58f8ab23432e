"""The paper's OPT-13B on two 8-GPU A100 nodes: the plan's instances span GPUs and nodes, and the emitted compose
files run them: a service per rank, on its stage's node, reserving its GPU, joining rank 0's rendezvous."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from services.cli import main
from services.deploy.compose import LABEL

SCHEMA = Path(__file__).resolve().parents[3].parent / "shared" / "schemas" / "compose-spec.json"
pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


def test_opt13b_on_two_nodes_emits_a_service_per_rank_with_its_gpu(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as done:
        main(["plan", "--model", "opt-13b", "--hardware", "a100-80gb", "--nodes", "2", "--gpus-per-node", "8",
              "--emit", "compose", "--out", str(tmp_path), "--plot", "", "--workers", "1"])
    assert done.value.code == 0
    docs = [yaml.safe_load((tmp_path / f"docker-compose.node{n}.yml").read_text()) for n in range(2)]
    if SCHEMA.exists():
        for doc in docs:
            jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(doc)
    instances = {name: json.loads(s["labels"][LABEL]) for doc in docs for name, s in doc["services"].items()
                 if LABEL in s.get("labels", {})}
    assert any(spec["tp"] * spec["pp"] > 1 for spec in instances.values())
    assert any(len({node for node, _ in spec["stages"]}) > 1 for spec in instances.values())  # stages on 2 nodes
    claimed: set[tuple[int, str]] = set()
    for name, spec in instances.items():
        ranks = [(node, gpu) for node, gpus in spec["stages"] for gpu in gpus]
        rank0 = docs[ranks[0][0]]["services"][name]["command"]
        for rank, (node, gpu) in enumerate(ranks):
            service = docs[node]["services"][f"{name}-rank{rank}" if rank else name]
            (device,) = service["deploy"]["resources"]["reservations"]["devices"]
            assert device["device_ids"] == [str(gpu)] and (node, str(gpu)) not in claimed
            claimed.add((node, str(gpu)))
            if rank:
                command = service["command"]
                assert command[command.index("--rendezvous") + 1] == rank0[rank0.index("--rendezvous") + 1]
                assert command[command.index("--rank") + 1] == str(rank)
                # its own node's kvxfer, the one its node's instances use: rank 0 registers and leases its pool there
                kvxfer = {s["environment"]["DISTSERVE_KVXFER"] for s in docs[node]["services"].values()
                          if "DISTSERVE_KVXFER" in s.get("environment", {})}
                assert kvxfer <= {command[command.index("--kvxfer") + 1]}
