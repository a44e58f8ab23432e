"""The check that rendered objects keep Alg. 2's rule: the prefill and decode segments of a stage share a node.

A decode instance paired with a prefill instance must place each of its pods, by a required pod-affinity term on
the node's hostname, with the prefill pod holding the same share (same worker index), and the two instances' plans
must put those shares on the same node with the same number of pods.
"""

from __future__ import annotations

from services.deploy.compose import spec_of
from services.deploy.k8s.instances import HOSTNAME, INSTANCE, SPEC, WORKER_INDEX
from services.deploy.k8s.layout import pod_layout, shares

PAIRED = "distserve.io/colocated-with"


def pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "LeaderWorkerSet":
        lwt = obj["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return [obj["spec"]["template"]]


def colocation_problems(objects: list[dict], all_paired: bool = False) -> list[str]:
    """What breaks the rule in `objects` (empty: none); `all_paired`: every decode instance must have a partner
    (an Alg. 2 placement)."""
    by_name = {o["metadata"]["name"]: o for o in objects if SPEC in o["metadata"].get("annotations", {})}
    problems = []
    for name, obj in by_name.items():
        spec = spec_of(obj["metadata"]["annotations"][SPEC])
        paired = obj["metadata"]["annotations"].get(PAIRED)
        if spec.role != "decode":
            continue
        if paired is None:
            problems += [f"{name}: no prefill instance shares its nodes"] if all_paired else []
            continue
        other = by_name.get(paired)
        if other is None:
            problems.append(f"{name}: paired with {paired}, which is not rendered")
            continue
        theirs = spec_of(other["metadata"]["annotations"][SPEC])
        if [n for n, _ in shares(spec)] != [n for n, _ in shares(theirs)]:
            problems.append(f"{name}: its shares are on nodes {shares(spec)}, {paired}'s on {shares(theirs)}")
        if pod_layout(spec).pods != pod_layout(theirs).pods or obj["kind"] != other["kind"]:
            problems.append(f"{name}: {pod_layout(spec).pods} pods, {paired} {pod_layout(theirs).pods}")
        want = {"labelSelector": {"matchLabels": {INSTANCE: paired}}, "topologyKey": HOSTNAME}
        if pod_layout(spec).spans_nodes:
            want["matchLabelKeys"] = [WORKER_INDEX]
        for template in pod_templates(obj):
            terms = (template["spec"].get("affinity", {}).get("podAffinity", {})
                     .get("requiredDuringSchedulingIgnoredDuringExecution", []))
            if want not in terms:
                problems.append(f"{name}: a pod template lacks the required affinity to {paired}'s pods")
    return problems
