"""The planner's Kubernetes actuator: two plans give the object diff between them (new instances applied first,
each removed one drained before it is deleted), running instances are read back from their objects and left
untouched, and the official client's calls are server-side applies with only the Role's verbs."""

from __future__ import annotations

import pytest

from services.deploy.k8s.base import ACTUATOR_RULES
from services.deploy.k8s.kube_actuator import ClusterApi, KubeActuator, RecordingApi, Step
from services.planner.actuation import apply_placement, specs_of
from services.planner.placement import Cluster, Parallel, Placement, pack, pack_units
from tests.unit.deploy.fake_kube import fake_kube

CLUSTER = Cluster(nodes=2, gpus_per_node=8)


def plan_diff(before: Placement, after: Placement) -> list[Step]:
    """The steps that turn `before`'s deployment into `after`'s: new instances applied first, then each surplus
    one drained and deleted (apply_placement's order)."""
    api = RecordingApi()
    apply_placement(KubeActuator(api), before)
    api.steps.clear()
    apply_placement(KubeActuator(api), after)  # the running instances read back from the objects
    return api.steps


def test_the_diff_of_two_plans_applies_new_instances_then_drains_before_deleting() -> None:
    before = pack(CLUSTER, Parallel(2, 1), 3, Parallel(1, 1), 4)
    after = pack(CLUSTER, Parallel(2, 1), 2, Parallel(1, 1), 6)
    # the new decode instances take GPUs prefill-2 holds: they start once it is gone
    assert plan_diff(before, after) == [Step("drain", "Deployment", "prefill-2"), Step("delete", "Deployment", "prefill-2"),
                                        Step("apply", "Deployment", "decode-4"), Step("apply", "Deployment", "decode-5")]
    grown = pack(CLUSTER, Parallel(2, 1), 3, Parallel(1, 1), 5)
    assert plan_diff(before, grown) == [Step("apply", "Deployment", "decode-4")]


def test_a_layout_change_replaces_every_instance_draining_each_first() -> None:
    before = pack(CLUSTER, Parallel(1, 1), 2, Parallel(1, 1), 2)
    after = pack_units(CLUSTER, Parallel(2, 2), Parallel(2, 1), cross=2, units=1)  # Alg. 2 across both nodes
    steps = plan_diff(before, after)
    assert [(s.op, s.kind) for s in steps if s.op == "apply"] == [("apply", "LeaderWorkerSet")] * 2
    removed = [s.name for s in steps if s.op == "delete"]
    assert sorted(removed) == ["decode-0", "decode-1", "prefill-0", "prefill-1"]
    for name in removed:  # each drained right before it is deleted
        i = steps.index(Step("delete", "Deployment", name))
        assert steps[i - 1] == Step("drain", "Deployment", name)


def test_replanning_reads_the_running_instances_back_and_keeps_them() -> None:
    api = RecordingApi()
    apply_placement(KubeActuator(api), pack(CLUSTER, Parallel(1, 1), 2, Parallel(1, 1), 2))
    objects = dict(api.objects)
    api.steps.clear()
    done = apply_placement(KubeActuator(api), pack(CLUSTER, Parallel(1, 1), 2, Parallel(1, 1), 3))
    assert sorted(done.kept) == ["decode-0", "decode-1", "prefill-0", "prefill-1"]
    assert api.steps == [Step("apply", "Deployment", "decode-2")]
    assert all(api.objects[name] is obj for name, obj in objects.items())  # not re-applied: no pod restarts


VERBS = {"GET": "list", "PATCH": "patch", "DELETE": "delete"}  # the calls past discovery, as RBAC names them


def test_the_client_server_side_applies_drains_and_deletes_with_the_roles_verbs() -> None:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    with fake_kube() as (kube, url):
        configuration = client.Configuration()
        configuration.host = url
        api = ClusterApi("distserve", api_client=client.ApiClient(configuration), poll_s=0.01)
        apply_placement(KubeActuator(api), pack(CLUSTER, Parallel(2, 1), 1, Parallel(1, 1), 2))
        assert sorted(name for _, name in kube.objects) == ["decode-0", "decode-1", "prefill-0"]
        kube.log.clear()
        done = apply_placement(KubeActuator(api), pack(CLUSTER, Parallel(2, 1), 1, Parallel(1, 1), 1))
        assert done.stopped == ["decode-1"] and sorted(name for _, name in kube.objects) == ["decode-0", "prefill-0"]
    calls = [(m, p, q, t) for m, p, q, t in kube.log if p.count("/") > 3]  # past discovery
    patches = [(p, q, t) for m, p, q, t in calls if m == "PATCH"]
    assert [t for _, _, t in patches] == ["application/merge-patch+json"]  # the drain: scale to zero
    pod_polls = [p for m, p, q, t in calls if p.endswith("/pods")]
    assert len(pod_polls) == 3  # until the drained pod is gone
    first = max(i for i, c in enumerate(calls) if c[0] == "PATCH")
    assert [c[0] for c in calls[first:] if c[0] != "GET"] == ["PATCH", "DELETE"]
    assert calls[-1][1] == "/apis/apps/v1/namespaces/distserve/deployments/decode-1"
    allowed = {(r, v) for rule in ACTUATOR_RULES for r in rule["resources"] for v in rule["verbs"]}
    used = {(p.split("/")[-1] if m == "GET" else p.split("/")[-2], VERBS[m]) for m, p, q, t in calls}
    assert used <= allowed


def test_new_objects_go_by_server_side_apply() -> None:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    with fake_kube() as (kube, url):
        configuration = client.Configuration()
        configuration.host = url
        api = ClusterApi("distserve", api_client=client.ApiClient(configuration))
        (spec,) = specs_of(pack(CLUSTER, Parallel(1, 1), 1, Parallel(1, 1), 0))
        assert KubeActuator(api).start(spec) == "prefill-0"
    (method, path, query, content_type), = [c for c in kube.log if c[0] == "PATCH"]
    assert content_type == "application/apply-patch+yaml"
    assert query == {"fieldManager": ["distserve-planner"], "force": ["true"]}
    assert path == "/apis/apps/v1/namespaces/distserve/deployments/prefill-0"
