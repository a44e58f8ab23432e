"""The planner's Actuator for Kubernetes: each instance is one workload object (instances.py), applied by
server-side apply through the official `kubernetes` client; a removed instance is drained (scaled to zero: its
pods get SIGTERM, deregister, finish what they hold, and are gone) before its object is deleted.

It touches only the instances' Deployments and LeaderWorkerSets, and lists pods to see a drain end: the verbs of
the planner's Role (stack.ACTUATOR_RULES). The rest of the deployment is the operator's `kubectl apply -k`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

from services.deploy.compose import spec_of
from services.deploy.k8s.base import redis_url
from services.deploy.k8s.instances import COMPONENT, INSTANCE, LWS_API, SPEC, TERMINATION_GRACE_S, instance_object
from services.planner.actuation import InstanceSpec, RunningInstance

FIELD_MANAGER = "distserve-planner"
KINDS = {"Deployment": "apps/v1", "LeaderWorkerSet": LWS_API}
SELECTOR = f"{COMPONENT} in (prefill,decode)"


@dataclass(frozen=True, slots=True)
class Step:
    """One call the actuator makes on the cluster."""

    op: str  # "apply" | "drain" | "delete"
    kind: str
    name: str


class KubeApi(Protocol):
    """The cluster operations the actuator uses, on one namespace."""

    def instances(self) -> list[dict]:
        """The instances' workload objects (Deployments and LeaderWorkerSets of prefill and decode)."""
        ...

    def apply(self, obj: dict) -> None:
        """Server-side apply `obj` (create or update)."""
        ...

    def drain(self, kind: str, name: str) -> None:
        """Scale the object to zero and return once its pods are gone."""
        ...

    def delete(self, kind: str, name: str) -> None:
        ...


@dataclass(slots=True)
class RecordingApi:
    """An in-memory namespace that records each step: dry runs and tests."""

    objects: dict[str, dict] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def instances(self) -> list[dict]:
        return list(self.objects.values())

    def apply(self, obj: dict) -> None:
        self.objects[obj["metadata"]["name"]] = obj
        self.steps.append(Step("apply", obj["kind"], obj["metadata"]["name"]))

    def drain(self, kind: str, name: str) -> None:
        self.steps.append(Step("drain", kind, name))

    def delete(self, kind: str, name: str) -> None:
        del self.objects[name]
        self.steps.append(Step("delete", kind, name))


class ClusterApi:
    """A namespace of a real cluster through `api_client`, else in-cluster credentials (the planner's
    ServiceAccount), else ~/.kube/config."""

    def __init__(self, namespace: str, api_client=None, drain_timeout_s: float = TERMINATION_GRACE_S + 30.0,
                 poll_s: float = 1.0) -> None:
        from kubernetes import client, config, dynamic

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self.namespace, self.drain_timeout_s, self.poll_s = namespace, drain_timeout_s, poll_s
        self.client = dynamic.DynamicClient(api_client)

    def _resource(self, kind: str):
        return self.client.resources.get(api_version=KINDS.get(kind, "v1"), kind=kind)

    def instances(self) -> list[dict]:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        found = []
        for kind in KINDS:
            try:
                listed = self._resource(kind).get(namespace=self.namespace, label_selector=SELECTOR)
            except ResourceNotFoundError:  # no LeaderWorkerSet CRD: no such instances
                continue
            found += [item.to_dict() for item in listed.items]
        return found

    def apply(self, obj: dict) -> None:
        self.client.server_side_apply(self._resource(obj["kind"]), body=obj, name=obj["metadata"]["name"],
                                      namespace=self.namespace, field_manager=FIELD_MANAGER, force_conflicts=True)

    def drain(self, kind: str, name: str) -> None:
        self.client.patch(self._resource(kind), body={"spec": {"replicas": 0}}, name=name, namespace=self.namespace,
                          content_type="application/merge-patch+json")
        pods, deadline = self._resource("Pod"), time.monotonic() + self.drain_timeout_s
        while pods.get(namespace=self.namespace, label_selector=f"{INSTANCE}={name}").items:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind} {name}: pods still running {self.drain_timeout_s:.0f} s after scaling to zero")
            time.sleep(self.poll_s)

    def delete(self, kind: str, name: str) -> None:
        self.client.delete(self._resource(kind), name=name, namespace=self.namespace)


class KubeActuator:
    """Actuator over the instance objects of one namespace."""

    def __init__(self, api: KubeApi, external_redis: str = "") -> None:
        self.api, self.url = api, redis_url(external_redis)
        self.kinds: dict[str, str] = {}
        self.instances: dict[str, InstanceSpec] = {}
        for obj in api.instances():
            name = obj["metadata"]["name"]
            self.kinds[name], self.instances[name] = obj["kind"], spec_of(obj["metadata"]["annotations"][SPEC])

    def running(self) -> list[RunningInstance]:
        return [RunningInstance(name, spec) for name, spec in self.instances.items()]

    def start(self, spec: InstanceSpec) -> str:
        """Apply the new instance's object (the first free `role-N` name); the objects of running instances are
        left as they are, so none restarts."""
        name = next(f"{spec.role}-{i}" for i in count() if f"{spec.role}-{i}" not in self.instances)
        self.instances[name] = spec
        obj = instance_object(name, spec, self.url)
        self.api.apply(obj)
        self.kinds[name] = obj["kind"]
        return name

    def drain(self, instance_id: str) -> None:
        self.api.drain(self.kinds[instance_id], instance_id)

    def stop(self, instance_id: str) -> None:
        self.api.delete(self.kinds.pop(instance_id), instance_id)
        del self.instances[instance_id]
