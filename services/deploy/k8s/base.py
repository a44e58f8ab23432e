"""The base of every deployment, the objects it has besides its instances (the word "stack" names what
`distserve up` starts, services/launcher/stack.py): Redis (or an external URL), router, planner with the
actuator's ServiceAccount and Role, kvxfer on every GPU node, disruption budgets, network policies and
Prometheus Operator PodMonitors."""

from __future__ import annotations

import json

from services.common import defaults
from services.common.redis_auth import USER as REDIS_USER
from services.common.secret import SECRET_ENV
from services.deploy.compose import (
    INSTANCE_METRICS_PORT,
    KVXFER_METRICS_PORT,
    KVXFER_PORT,
    KVXFER_UCX_PORT,
    PLANNER_PORT,
    REDIS_IMAGE,
    REDIS_PORT,
    ROUTER_GRPC_PORT,
    ROUTER_HTTP_PORT,
    ROUTER_METRICS_PORT,
)
from services.deploy.k8s.instances import (
    COMPONENT,
    GPU_NODES,
    IMAGE,
    MODEL,
    PART_OF,
    SHM,
    TERMINATION_GRACE_S,
    USER,
    field_env,
    grpc_probes,
    host_sharing,
    labels,
    secret_path,
    secret_volume,
)
from services.deploy.observability import dashboard

REDIS_SERVICE = "distserve-redis"
ROLES = ("prefill", "decode")
MONITORING_NAMESPACE = "monitoring"  # where Prometheus runs: it alone reaches the metrics ports from outside
# what the planner's actuator does, and nothing more: list, server-side apply (patch, and create for a new
# object), scale to zero (patch) and delete its instances' workloads; list pods to see a drain end
ACTUATOR_RULES = [
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "create", "patch", "delete"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"],
     "verbs": ["list", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]


def redis_url(external: str = "") -> str:
    """`external`, else the in-namespace Redis as the deployment's ACL user (each service fills in the password)."""
    return external or f"redis://{REDIS_USER}@{REDIS_SERVICE}:{REDIS_PORT}/0"


def _meta(name: str, component: str, **extra) -> dict:
    return {"name": name, "labels": labels(component), **extra}


def _deployment(name: str, component: str, pod: dict, replicas: int = 1) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, component),
            "spec": {"replicas": replicas, "selector": {"matchLabels": {COMPONENT: component}},
                     "template": {"metadata": {"labels": labels(component)}, "spec": pod}}}


def _service(name: str, component: str, ports: dict[str, int]) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, component),
            "spec": {"selector": {COMPONENT: component},
                     "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports.items()]}}


def _container(name: str, command: list[str], secrets: tuple[str, ...], ports: dict[str, int], env: list[dict]) -> dict:
    return {"name": name, "image": IMAGE, "command": command, "env": env,
            "ports": [{"name": n, "containerPort": p} for n, p in ports.items()],
            "volumeMounts": [secret_volume(s)[1] for s in secrets]}


def _distserve_env(url: str) -> list[dict]:
    return [field_env("POD_IP", "status.podIP"), {"name": "DISTSERVE_REDIS_URL", "value": url},
            {"name": SECRET_ENV, "value": secret_path("distserve-deployment-secret")}]


def redis() -> list[dict]:
    """Redis admitting only the deployment's ACL user (`distserve redis-acl`, the distserve-redis-acl Secret)."""
    volume, mount = secret_volume("distserve-redis-acl")
    container = {"name": "redis", "image": REDIS_IMAGE,
                 "command": ["redis-server", "--port", str(REDIS_PORT), "--appendonly", "yes",
                             "--aclfile", secret_path("distserve-redis-acl")],
                 "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
                 "volumeMounts": [mount, {"name": "data", "mountPath": "/data"}],
                 "livenessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 10},
                 "readinessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 5}}
    pod = {"containers": [container], "volumes": [volume, {"name": "data", "emptyDir": {}}],
           "securityContext": {"fsGroup": 999}}  # the redis image's user
    return [_deployment(REDIS_SERVICE, "redis", pod), _service(REDIS_SERVICE, "redis", {"redis": REDIS_PORT})]


def router(url: str, replicas: int = 2) -> list[dict]:
    """Routers behind one Service, TLS on their client ports (the distserve-router-tls Secret); probed over
    HTTPS /health, since kubelet's gRPC probe speaks plaintext only."""
    secrets = ("distserve-deployment-secret", "distserve-api-keys", "distserve-router-tls")
    ports = {"grpc": ROUTER_GRPC_PORT, "http": ROUTER_HTTP_PORT, "metrics": ROUTER_METRICS_PORT}
    command = ["distserve", "router", "--model", "/model", "--host", "0.0.0.0", "--grpc-port", str(ROUTER_GRPC_PORT),
               "--http-port", str(ROUTER_HTTP_PORT), "--metrics-port", str(ROUTER_METRICS_PORT),
               "--api-key-file", secret_path("distserve-api-keys"),
               "--tls-cert", secret_path("distserve-router-tls", "tls.crt"),
               "--tls-key", secret_path("distserve-router-tls", "tls.key")]
    env = [*_distserve_env(url), {"name": "DISTSERVE_ROUTER_REDIS_URL", "value": url},
           {"name": "DISTSERVE_ROUTER_DRAIN_GRACE_S", "value": str(defaults.DRAIN_GRACE_S)}]
    container = _container("router", command, secrets, ports, env)
    probe = {"httpGet": {"path": "/health", "port": ROUTER_HTTP_PORT, "scheme": "HTTPS"}, "timeoutSeconds": 5}
    container.update(livenessProbe={**probe, "periodSeconds": 10, "failureThreshold": 3},
                     readinessProbe={**probe, "periodSeconds": 5})
    container["volumeMounts"].append(MODEL[1])
    pod = {"containers": [container], "volumes": [secret_volume(s)[0] for s in secrets] + [MODEL[0]],
           "terminationGracePeriodSeconds": TERMINATION_GRACE_S, "securityContext": USER}
    service = _service("distserve-router", "router", {"grpc": ROUTER_GRPC_PORT, "http": ROUTER_HTTP_PORT})
    return [_deployment("distserve-router", "router", pod, replicas), service]


def planner(url: str) -> list[dict]:
    """The planner's REST API, with the ServiceAccount its Kubernetes actuator applies replans as."""
    secrets = ("distserve-deployment-secret", "distserve-admin-keys")
    command = ["distserve", "planner", "--host", "0.0.0.0", "--port", str(PLANNER_PORT), "--redis-url", url,
               "--admin-key-file", secret_path("distserve-admin-keys"), "--k8s-namespace", "$(POD_NAMESPACE)"]
    env = [*_distserve_env(url), field_env("POD_NAMESPACE", "metadata.namespace")]
    container = _container("planner", command, secrets, {"http": PLANNER_PORT}, env)
    probe = {"httpGet": {"path": "/healthz", "port": PLANNER_PORT}, "timeoutSeconds": 5}
    container.update(livenessProbe={**probe, "periodSeconds": 10}, readinessProbe={**probe, "periodSeconds": 5})
    pod = {"containers": [container], "volumes": [secret_volume(s)[0] for s in secrets],
           "serviceAccountName": "distserve-planner", "securityContext": USER}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _meta("distserve-planner", "planner"), "rules": ACTUATOR_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": _meta("distserve-planner", "planner"),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "distserve-planner"},
               "subjects": [{"kind": "ServiceAccount", "name": "distserve-planner"}]}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("distserve-planner", "planner")}
    return [_deployment("distserve-planner", "planner", pod), _service("distserve-planner", "planner",
                                                                     {"http": PLANNER_PORT}), account, role, binding]


def kvxfer() -> dict:
    """One kvxfer per GPU node, on the host's network (its address goes into KV handles; UCX opens ports of its
    own) and sharing the host's IPC and PID namespaces to map the instances' pools: the trust boundary."""
    volume, mount = secret_volume("distserve-deployment-secret")
    command = ["distserve", "kvxfer", "--host", "$(HOST_IP)", "--port", str(KVXFER_PORT), "--ucx-port",
               str(KVXFER_UCX_PORT), "--metrics-port", str(KVXFER_METRICS_PORT), "--encrypt-kv", "true"]
    env = [field_env("HOST_IP", "status.hostIP"), field_env("DISTSERVE_KVXFER_HOST_ID", "spec.nodeName"),
           {"name": SECRET_ENV, "value": secret_path("distserve-deployment-secret")},
           {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]  # it maps every GPU's pools, claims none
    container = {"name": "kvxfer", "image": IMAGE, "command": command, "env": env,
                 "ports": [{"name": "grpc", "containerPort": KVXFER_PORT},
                           {"name": "ucx", "containerPort": KVXFER_UCX_PORT},
                           {"name": "metrics", "containerPort": KVXFER_METRICS_PORT}],
                 "volumeMounts": [mount, SHM[1]], **grpc_probes(KVXFER_PORT)}
    pod = {"containers": [container], "volumes": [volume, SHM[0]], "nodeSelector": dict(GPU_NODES),
           "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", **host_sharing(), "securityContext": USER,
           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta("distserve-kvxfer", "kvxfer"),
            "spec": {"selector": {"matchLabels": {COMPONENT: "kvxfer"}},
                     "template": {"metadata": {"labels": labels("kvxfer")}, "spec": pod}}}


def disruption_budgets() -> list[dict]:
    """A voluntary disruption (a node drain) takes one prefill and one decode pod at a time, and leaves a router."""
    def pdb(component: str, limit: dict) -> dict:
        return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(f"distserve-{component}", component),
                "spec": {**limit, "selector": {"matchLabels": {PART_OF: "distserve", COMPONENT: component}}}}
    return [pdb(role, {"maxUnavailable": 1}) for role in ROLES] + [pdb("router", {"minAvailable": 1})]


def network_policies() -> list[dict]:
    """Pods admit only the namespace's own pods, except the router's client ports (anyone) and the metrics ports
    (Prometheus's namespace). kvxfer is on the host network, where these policies do not reach: it admits only
    callers with the deployment's token, and encrypts the KV it sends between hosts."""
    everything = {"matchLabels": {PART_OF: "distserve"}}
    def policy(name: str, selector: dict, ingress: list[dict]) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name, "network"),
                "spec": {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": ingress}}
    metrics_ports = [{"port": p} for p in (ROUTER_METRICS_PORT, INSTANCE_METRICS_PORT, PLANNER_PORT)]
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}
    return [policy("distserve-same-namespace", {}, [{"from": [{"podSelector": {}}]}]),
            policy("distserve-router-clients", {"matchLabels": {COMPONENT: "router"}},
                   [{"ports": [{"port": ROUTER_GRPC_PORT}, {"port": ROUTER_HTTP_PORT}]}]),
            policy("distserve-metrics", everything, [{"from": [monitoring], "ports": metrics_ports}])]


def pod_monitors() -> list[dict]:
    """What Prometheus Operator scrapes: every pod's `metrics` port (the planner's on its API port)."""
    def monitor(name: str, components: list[str], port: str) -> dict:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": _meta(name, "monitoring"),
                "spec": {"selector": {"matchLabels": {PART_OF: "distserve"},
                                      "matchExpressions": [{"key": COMPONENT, "operator": "In", "values": components}]},
                         "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "15s"}]}}
    return [monitor("distserve", ["router", "kvxfer", *ROLES], "metrics"),
            monitor("distserve-planner", ["planner"], "http")]


def dashboard_config_map() -> dict:
    """The Grafana dashboard, for Grafana's dashboard sidecar (which loads ConfigMaps labelled grafana_dashboard)."""
    meta = _meta("distserve-dashboard", "monitoring")
    meta["labels"]["grafana_dashboard"] = "1"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"distserve.json": json.dumps(dashboard(), indent=1)}}


def base_objects(external_redis: str = "") -> list[dict]:
    """Everything but the instances; `external_redis`: the URL of a Redis run elsewhere (then none here)."""
    url = redis_url(external_redis)
    return [*([] if external_redis else redis()), *router(url), *planner(url), kvxfer(),
            *disruption_budgets(), *network_policies(), *pod_monitors(), dashboard_config_map()]

