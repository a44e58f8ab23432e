"""The workload object of one prefill or decode instance: a Deployment when it runs on one node, a
LeaderWorkerSet when its stages span nodes, a container per rank with its own `nvidia.com/gpu`.

Every instance pod shares the host's IPC and PID namespaces and /dev/shm with its node's kvxfer, which maps
the pod's KV pools by CUDA IPC (docs/kubernetes.md, the trust boundary). Pods go where the plan puts them: a
required pod affinity on the hostname binds the pods of one node group (the plan's nodes, `distserve.io/nodes`)
that hold the same share (same LeaderWorkerSet worker index) to one node, so the prefill and decode segments
of an Alg. 2 stage share it and their KV moves over NVLink. The rule is symmetric (the first such pod goes
anywhere, the others follow it), so no instance waits for another.
"""

from __future__ import annotations

import copy
import hashlib
import json

from services.common import defaults
from services.common.secret import SECRET_ENV
from services.deploy.compose import INSTANCE_METRICS_PORT, INSTANCE_PORT, KVXFER_PORT, RENDEZVOUS_PORT, spec_json
from services.deploy.k8s.layout import PodLayout, node_group, pod_layout
from services.planner.actuation import InstanceSpec, gpu_ranks

IMAGE = "distserve:latest"  # the overlay's `images:` names the real one
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "distserve.io/instance"  # label: the instance's name; annotation SPEC: its InstanceSpec as JSON
NODES = "distserve.io/nodes"  # pod label: the plan's nodes of the instance's pods (layout.node_group)
SPEC = "distserve.io/spec"
RENDERED = "distserve.io/rendered"  # hash of the object as rendered: the actuator's change detection
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GPU_NODES = {"nvidia.com/gpu.present": "true"}  # GPU feature discovery's node label
LWS_API = "leaderworkerset.x-k8s.io/v1"
SECRETS = {  # Secret → (key, mount folder): every file a service reads, one Secret each
    "distserve-deployment-secret": ("secret", "/run/secrets/deployment"),
    "distserve-api-keys": ("api-keys", "/run/secrets/api-keys"),
    "distserve-admin-keys": ("admin-keys", "/run/secrets/admin-keys"),
    "distserve-redis-acl": ("redis.acl", "/run/secrets/redis"),
    "distserve-router-tls": ("tls.crt", "/run/secrets/router-tls"),  # and tls.key: the router's client ports
}
USER = {"fsGroup": 10001}  # the image's user (deploy/Dockerfile) reads the Secrets mounted 0440
TERMINATION_GRACE_S = int(defaults.DRAIN_GRACE_S) + 10  # SIGTERM, the drain grace, then deregister and close


def secret_path(secret: str, key: str = "") -> str:
    default_key, folder = SECRETS[secret]
    return f"{folder}/{key or default_key}"


def labels(component: str, **extra: str) -> dict[str, str]:
    return {PART_OF: "distserve", COMPONENT: component, **extra}


def field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def secret_volume(secret: str) -> tuple[dict, dict]:
    """(volume, mount) of a Secret, read-only, at its folder."""
    name = secret.removeprefix("distserve-")
    return ({"name": name, "secret": {"secretName": secret, "defaultMode": 0o440}},
            {"name": name, "mountPath": SECRETS[secret][1], "readOnly": True})


def grpc_probes(port: int, startup_s: int = 60) -> dict:
    """Native gRPC probes on the service's health service: startup (model loading), liveness, readiness."""
    probe = {"grpc": {"port": port}, "timeoutSeconds": 5}
    return {"startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": max(1, startup_s // 10)},
            "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 6},
            "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 2}}


def host_sharing() -> dict:
    """Pod fields kvxfer and the instances need to share KV pools by CUDA IPC."""
    return {"hostIPC": True, "hostPID": True}


SHM = ({"name": "shm", "hostPath": {"path": "/dev/shm", "type": "Directory"}},
       {"name": "shm", "mountPath": "/dev/shm"})
MODEL = ({"name": "model", "persistentVolumeClaim": {"claimName": "distserve-model", "readOnly": True}},
         {"name": "model", "mountPath": "/model", "readOnly": True})


def _env(redis_url: str) -> list[dict]:
    return [field_env("POD_IP", "status.podIP"), field_env("HOST_IP", "status.hostIP"),
            field_env("DISTSERVE_NODE", "spec.nodeName"),
            {"name": "DISTSERVE_KVXFER", "value": f"$(HOST_IP):{KVXFER_PORT}"},
            {"name": "DISTSERVE_REDIS_URL", "value": redis_url},
            {"name": "DISTSERVE_DRAIN_GRACE_S", "value": str(defaults.DRAIN_GRACE_S)},
            {"name": SECRET_ENV, "value": secret_path("distserve-deployment-secret")}]


def _rank_command(rank: int | str, rendezvous: str) -> list[str]:
    return ["distserve", "rank", "--rendezvous", rendezvous, "--rank", str(rank), "--device", "cuda:0",
            "--model", "/model", "--kvxfer", f"$(HOST_IP):{KVXFER_PORT}"]


def _container(name: str, command: list[str], env: list[dict]) -> dict:
    _, secret_mount = secret_volume("distserve-deployment-secret")
    return {"name": name, "image": IMAGE, "command": command, "env": env,
            "resources": {"requests": {GPU: 1}, "limits": {GPU: 1}},
            "volumeMounts": [MODEL[1], SHM[1], secret_mount]}


def _rank0(name: str, spec: InstanceSpec, rendezvous: str, env: list[dict]) -> dict:
    command = ["distserve", spec.role, "--model", "/model", "--device", "cuda:0", "--host", "$(POD_IP)",
               "--port", str(INSTANCE_PORT), "--metrics-port", str(INSTANCE_METRICS_PORT), "--instance-id", name]
    if spec.tp * spec.pp > 1:
        command += [*spec.parallel_flags(), "--rendezvous", rendezvous]
    container = _container("rank0", command, env)
    container["ports"] = [{"name": "grpc", "containerPort": INSTANCE_PORT},
                          {"name": "metrics", "containerPort": INSTANCE_METRICS_PORT}]
    return {**container, **grpc_probes(INSTANCE_PORT, startup_s=600)}


def _affinity(name: str, group: str | None, layout: PodLayout) -> dict:
    affinity: dict = {}
    if group is not None:
        term = {"labelSelector": {"matchLabels": {NODES: group}}, "topologyKey": HOSTNAME}
        if layout.spans_nodes:
            term["matchLabelKeys"] = [WORKER_INDEX]  # with the pods holding the same share
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if layout.spans_nodes and layout.per_node:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {INSTANCE: name}}, "topologyKey": HOSTNAME}]}
    return affinity


def _pod(name: str, spec: InstanceSpec, containers: list[dict], affinity: dict, group: str | None) -> dict:
    secret, _ = secret_volume("distserve-deployment-secret")
    pod = {"containers": containers, "nodeSelector": dict(GPU_NODES), **host_sharing(), "securityContext": USER,
           "terminationGracePeriodSeconds": TERMINATION_GRACE_S, "volumes": [MODEL[0], SHM[0], secret],
           "enableServiceLinks": False}
    if affinity:
        pod["affinity"] = copy.deepcopy(affinity)  # each template its own: editing one leaves the other
    return {"metadata": {"labels": labels(spec.role, **{INSTANCE: name}, **({NODES: group} if group else {}))},
            "spec": pod}


def _metadata(name: str, spec: InstanceSpec) -> dict:
    return {"name": name, "labels": labels(spec.role, **{INSTANCE: name}), "annotations": {SPEC: spec_json(spec)}}


def instance_object(name: str, spec: InstanceSpec, redis_url: str) -> dict:
    """The instance's Deployment (one node) or LeaderWorkerSet (its shares on several nodes)."""
    layout, group = pod_layout(gpu_ranks(spec, "kubernetes")), node_group(spec)
    env = _env(redis_url)
    affinity = _affinity(name, group, layout)
    if not layout.spans_nodes:
        rendezvous = f"127.0.0.1:{RENDEZVOUS_PORT}"  # the pod's containers share its network namespace
        containers = [_rank0(name, spec, rendezvous, env)]
        containers += [_container(f"rank{r}", _rank_command(r, rendezvous), env) for r in range(1, layout.ranks)]
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(name, spec),
               "spec": {"replicas": 1, "strategy": {"type": "Recreate"},  # a new pod needs the old one's GPUs
                        "selector": {"matchLabels": {INSTANCE: name}},
                        "template": _pod(name, spec, containers, affinity, group)}}
        return with_rendered(obj)
    rendezvous = f"$(LWS_LEADER_ADDRESS):{RENDEZVOUS_PORT}"  # the leader pod: share 0, rank 0's
    leader = [_rank0(name, spec, rendezvous, env)]
    leader += [_container(f"rank{r}", _rank_command(r, rendezvous), env) for r in range(1, layout.ranks)]
    # a worker's ranks follow from its index, which LeaderWorkerSet gives each pod in LWS_WORKER_INDEX
    # ($$ is Kubernetes' escape for the shell's $)
    workers = [_container(f"rank-local{k}", ["sh", "-c", "exec " + " ".join(_rank_command(
        f"$$((LWS_WORKER_INDEX * {layout.ranks} + {k}))", rendezvous))], env) for k in range(layout.ranks)]
    obj = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": _metadata(name, spec),
           "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {"size": layout.pods, "restartPolicy": "RecreateGroupOnPodRestart",
                                             "leaderTemplate": _pod(name, spec, leader, affinity, group),
                                             "workerTemplate": _pod(name, spec, workers, affinity, group)}}}
    return with_rendered(obj)


def with_rendered(obj: dict) -> dict:
    """`obj` annotated with the hash of what was rendered (the actuator applies only what changed)."""
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    obj["metadata"].setdefault("annotations", {})[RENDERED] = digest
    return obj
