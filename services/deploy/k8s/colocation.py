"""The check that rendered objects keep the plan's nodes, and so Alg. 2's rule: the prefill and decode segments
of a stage share a node.

An instance with one pod per node must label its pods with its node group (the plan's nodes of its pods) and
require, by pod affinity on the hostname, the node of the group's pods holding the same share; under Alg. 2 every
decode instance must have a prefill instance of the same node group and number of pods.
"""

from __future__ import annotations

from services.deploy.compose import spec_of
from services.deploy.k8s.instances import HOSTNAME, NODES, SPEC, WORKER_INDEX
from services.deploy.k8s.layout import node_group, pod_layout


def pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "LeaderWorkerSet":
        lwt = obj["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return [obj["spec"]["template"]]


def colocation_problems(objects: list[dict], all_paired: bool = False) -> list[str]:
    """What breaks the rule in `objects` (empty: none); `all_paired`: an Alg. 2 placement, where each decode
    instance's segments share nodes with a prefill instance's."""
    specs = {o["metadata"]["name"]: (o, spec_of(o["metadata"]["annotations"][SPEC]))
             for o in objects if SPEC in o["metadata"].get("annotations", {})}
    problems = []
    for name, (obj, spec) in specs.items():
        group = node_group(spec)
        if group is None:
            continue
        want = {"labelSelector": {"matchLabels": {NODES: group}}, "topologyKey": HOSTNAME}
        if pod_layout(spec).spans_nodes:
            want["matchLabelKeys"] = [WORKER_INDEX]
        for template in pod_templates(obj):
            terms = (template["spec"].get("affinity", {}).get("podAffinity", {})
                     .get("requiredDuringSchedulingIgnoredDuringExecution", []))
            if template["metadata"]["labels"].get(NODES) != group or want not in terms:
                problems.append(f"{name}: a pod template does not keep its pods on the nodes of group {group}")
    if all_paired:
        prefills = {(node_group(s), pod_layout(s).pods) for _, s in specs.values() if s.role == "prefill"}
        problems += [f"{name}: no prefill instance shares its nodes {node_group(s)}" for name, (_, s) in specs.items()
                     if s.role == "decode" and (node_group(s) is None or (node_group(s), pod_layout(s).pods) not in prefills)]
    return problems
