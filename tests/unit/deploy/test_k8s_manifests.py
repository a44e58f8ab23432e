"""`distserve plan --emit k8s`: every manifest validates offline (Kubernetes 1.33 schemas, the LeaderWorkerSet
and PodMonitor CRDs) for the OPT-13B 1x4 and 2x8 plans and an OPT-175B 4x8 plan; Alg. 2's co-location is
expressed and checked; only the router is open beyond the namespace."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from pathlib import Path

import pytest
import yaml

from services.cli import build_parser, main
from services.deploy.compose import named_instances, spec_of
from services.deploy.k8s.colocation import colocation_problems, pod_templates
from services.deploy.k8s.instances import COMPONENT, GPU, HOSTNAME, SPEC
from services.deploy.k8s.manifests import all_objects
from services.planner.placement import Cluster, Parallel, pack, pack_units
from tests.unit.deploy.k8s_schemas import validate

pytest.importorskip("kubernetes_validate")
PLANS = {  # name → `distserve plan` flags
    "opt-13b 1x4": ["--model", "opt-13b", "--nodes", "1", "--gpus-per-node", "4"],
    "opt-13b 2x8 low-affinity": ["--model", "opt-13b", "--nodes", "2", "--gpus-per-node", "8", "--algorithm", "low-affinity"],
    "opt-175b 4x8 low-affinity": ["--model", "opt-175b", "--nodes", "4", "--gpus-per-node", "8",
                                  "--algorithm", "low-affinity"],
}


@pytest.fixture(scope="module", params=list(PLANS))
def emitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("k8s")
    with pytest.raises(SystemExit) as exit_:
        main(["plan", *PLANS[request.param], "--input-len", "256", "--output-len", "64", "--num-requests", "50",
              "--workers", "1", "--plot", "", "--emit", "k8s", "--out", str(out)])
    assert exit_.value.code == 0
    return request.param, out


def manifests(out: Path) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted(out.rglob("*.yaml")) if p.name != "kustomization.yaml"]


@pytest.mark.slow
def test_every_emitted_manifest_validates(emitted: tuple[str, Path]) -> None:
    name, out = emitted
    objects = manifests(out)
    for obj in objects:
        validate(obj)
    kinds = Counter(o["kind"] for o in objects)
    print(f"{name}: {len(objects)} manifests valid: {dict(sorted(kinds.items()))}")
    if name.startswith("opt-175b"):
        assert kinds["LeaderWorkerSet"] == 2  # one prefill and one decode instance, each spanning the 4 nodes
    base = yaml.safe_load((out / "base" / "kustomization.yaml").read_text())
    assert sorted(base["resources"]) == sorted(p.name for p in (out / "base").glob("*.yaml") if p.name != "kustomization.yaml")
    overlay = yaml.safe_load((out / "overlays" / "default" / "kustomization.yaml").read_text())
    assert all((out / "overlays" / "default" / r).exists() for r in overlay["resources"])


def gpus(obj: dict) -> tuple[int, int]:
    """(GPUs the object's pods request, GPUs its instance's plan gives it)."""
    if obj["kind"] == "Deployment":
        templates = [(obj["spec"]["template"], 1)]
    else:
        lwt = obj["spec"]["leaderWorkerTemplate"]
        templates = [(lwt["leaderTemplate"], 1), (lwt["workerTemplate"], lwt["size"] - 1)]
    requested = sum(pods * c["resources"]["limits"][GPU] for t, pods in templates for c in t["spec"]["containers"])
    return requested, sum(len(s.gpus) for s in spec_of(obj["metadata"]["annotations"][SPEC]).stages)


@pytest.mark.slow
def test_each_instance_requests_its_planned_gpus_and_alg2_pairs_share_nodes(emitted: tuple[str, Path]) -> None:
    name, out = emitted
    objects = manifests(out)
    instances = [o for o in objects if SPEC in o["metadata"].get("annotations", {})]
    assert instances
    for obj in instances:
        requested, planned = gpus(obj)
        assert requested == planned, obj["metadata"]["name"]
    assert colocation_problems(objects, all_paired="low-affinity" in name) == []


def test_alg2_segments_of_a_stage_are_bound_to_one_node_and_checked() -> None:
    placement = pack_units(Cluster(nodes=2, gpus_per_node=8), Parallel(2, 2), Parallel(2, 1), cross=2, units=1)
    objects = all_objects(named_instances(placement))
    by_name = {o["metadata"]["name"]: o for o in objects}
    for name in ("prefill-0", "decode-0"):
        lwt = by_name[name]["spec"]["leaderWorkerTemplate"]
        assert by_name[name]["kind"] == "LeaderWorkerSet" and lwt["size"] == 2  # a pod on each of the 2 nodes
        (term,) = lwt["workerTemplate"]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"distserve.io/nodes": "0.1"}}, "topologyKey": HOSTNAME,
                        "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/worker-index"]}
    assert colocation_problems(objects, all_paired=True) == []
    del by_name["decode-0"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"]["podAffinity"]
    assert colocation_problems(objects) == ["decode-0: a pod template does not keep its pods on the nodes of group 0.1"]
    alone = [o for o in objects if o["metadata"]["name"] != "prefill-0"]
    assert "decode-0: no prefill instance shares its nodes 0.1" in colocation_problems(alone, all_paired=True)


def test_stages_split_unevenly_across_nodes_run_one_pod_per_stage() -> None:
    # 3 free GPUs on node 0 after the first instance: the second's 4 stages go 1 on node 0 and 3 on node 1
    placement = pack(Cluster(nodes=2, gpus_per_node=4), Parallel(1, 5), 1, Parallel(1, 2), 1)
    objects = all_objects(named_instances(placement))
    by_name = {o["metadata"]["name"]: o for o in objects}
    for obj in objects:
        validate(obj)
    lwt = by_name["prefill-0"]["spec"]["leaderWorkerTemplate"]
    assert by_name["prefill-0"]["kind"] == "LeaderWorkerSet" and lwt["size"] == 5
    assert "affinity" not in lwt["workerTemplate"]["spec"]  # high node-affinity: a stage goes where it fits
    assert gpus(by_name["prefill-0"]) == (5, 5)


def test_only_the_router_is_open_beyond_the_namespace() -> None:
    objects = all_objects(named_instances(pack(Cluster(nodes=1, gpus_per_node=2), Parallel(1, 1), 1, Parallel(1, 1), 1)))
    policies = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"}
    assert policies["distserve-same-namespace"]["podSelector"] == {}  # every pod: the namespace's own pods only
    beyond = {name for name, spec in policies.items() for rule in spec["ingress"]
              if "from" not in rule or any("namespaceSelector" in peer for peer in rule["from"])}
    assert beyond == {"distserve-router-clients", "distserve-metrics"}
    assert policies["distserve-router-clients"]["podSelector"] == {"matchLabels": {COMPONENT: "router"}}
    metrics = policies["distserve-metrics"]["ingress"][0]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert all(port["port"] not in (50051, 8000, 50100, 6379) for port in metrics["ports"])


def test_every_container_command_parses() -> None:
    placement = pack_units(Cluster(nodes=2, gpus_per_node=8), Parallel(2, 2), Parallel(2, 1), cross=2, units=1)
    commands = []
    for obj in all_objects(named_instances(placement)):
        templates = pod_templates(obj) if obj["kind"] in ("Deployment", "LeaderWorkerSet") else \
            [obj["spec"]["template"]] if obj["kind"] == "DaemonSet" else []
        commands += [c["command"] for t in templates for c in t["spec"]["containers"]]
    parser = build_parser()
    for command in commands:
        if command[0] == "sh":  # a worker pod's rank: its number from the pod's index
            command = shlex.split(re.sub(r"\$\$\(\(LWS_WORKER_INDEX \* \d+ \+ \d+\)\)", "3", command[2].removeprefix("exec ")))
        if command[0] == "distserve":
            parser.parse_args(command[1:])
    assert {c[1] for c in commands if c[0] == "distserve"} == {"router", "planner", "kvxfer", "prefill", "decode", "rank"}


def test_an_external_redis_replaces_the_namespaces_own() -> None:
    instances = named_instances(pack(Cluster(nodes=1, gpus_per_node=2), Parallel(1, 1), 1, Parallel(1, 1), 1))
    url = "rediss://distserve@redis.example.com:6380/0"
    objects = all_objects(instances, url)
    assert not [o for o in objects if o["metadata"]["name"] == "distserve-redis"]
    env = {e["name"]: e.get("value") for o in objects if o["kind"] == "Deployment"
           for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    assert env["DISTSERVE_REDIS_URL"] == url and env["DISTSERVE_ROUTER_REDIS_URL"] == url
