"""Compose files for a placement (docs/architecture.md §10): one per host, all sharing the first host's Redis.

A pure function from named instances (role, parallelism, node and GPUs of each stage) to one compose document
per host, and its inverse (the labels carry each instance's spec back). Every service uses the host network,
so the addresses written into Redis and into KV handles are the hosts' own, and UCX may open any port it needs.
Commands say what a service is and where it listens; the environment says what it connects to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import yaml

from services.common import defaults
from services.common.redis_auth import USER as REDIS_USER
from services.deploy.compose_secrets import REDIS_ACL, RUN, TLS, secrets_section, with_credentials
from services.planner.actuation import InstanceSpec, gpu_ranks, specs_of
from services.planner.placement import Placement, Stage

IMAGE = "${DISTSERVE_IMAGE:-distserve:latest}"
MODEL_VOLUME = "${DISTSERVE_MODEL_DIR:-./model}:/model:ro"
REDIS_IMAGE = "redis:7.4-alpine"
REDIS_PORT = 6379
ROUTER_GRPC_PORT, ROUTER_HTTP_PORT, ROUTER_METRICS_PORT = 50051, 8000, 9100
PLANNER_PORT = 8001
KVXFER_PORT, KVXFER_UCX_PORT, KVXFER_METRICS_PORT = 50061, 50062, 9101
INSTANCE_PORT, INSTANCE_METRICS_PORT = 50100, 9200  # plus the instance's first GPU: unique on its host, stable
RENDEZVOUS_PORT = 50200  # plus the first GPU: where a TP/PP instance's rank 0 waits for its other ranks
LABEL = "distserve.instance"  # JSON of the InstanceSpec: the actuator reads running instances back from it


# SIGTERM, then the services' own drain grace, then a margin to deregister and close before compose kills
STOP_GRACE = f"{int(defaults.DRAIN_GRACE_S) + 10}s"


def file_name(node: int) -> str:
    return f"docker-compose.node{node}.yml"


def node_addresses(nodes: int, given: str = "") -> tuple[str, ...]:
    """The comma-separated addresses in `given`, else 127.0.0.1 for one node and node0, node1, ... for more."""
    if given:
        addresses = tuple(a.strip() for a in given.split(",") if a.strip())
        if len(addresses) != nodes:
            raise ValueError(f"--node-addresses: {len(addresses)} addresses for {nodes} nodes")
        return addresses
    return ("127.0.0.1",) if nodes == 1 else tuple(f"node{n}" for n in range(nodes))


def named_instances(placement: Placement) -> dict[str, InstanceSpec]:
    """The placement's instances under their service names, `prefill-0`, `decode-1`, ..."""
    return {f"{inst.role}-{inst.index}": spec for inst, spec in zip(placement.instances, specs_of(placement))}


def spec_json(spec: InstanceSpec) -> str:
    """The instance's spec as the JSON a deployment labels it with (read back by `spec_of`)."""
    return json.dumps({"role": spec.role, "tp": spec.tp, "pp": spec.pp, "ep": spec.ep,
                       "stages": [[s.node, list(s.gpus)] for s in spec.stages]})


def spec_of(text: str) -> InstanceSpec:
    spec = json.loads(text)
    return InstanceSpec(spec["role"], spec["tp"], spec["pp"], tuple(Stage(n, tuple(g)) for n, g in spec["stages"]),
                        spec.get("ep", spec["tp"]))  # a label written before EP was: the experts whole (EP = TP)


def _shared_memory() -> dict:
    """CUDA IPC between the containers of one host needs their IPC and PID namespaces shared (the host's, so a
    restarted kvxfer finds them again); UCX pins memory, so memlock is unlimited. /dev/shm is then the host's:
    no shm_size, which Docker ignores under `ipc: host`."""
    return {"ipc": "host", "pid": "host", "ulimits": {"memlock": {"soft": -1, "hard": -1}}}


def _service(command: list[str], health: str, start_period: str = "30s", plaintext: bool = False) -> dict:
    check = ["CMD", "distserve", "health", health, *(["--plaintext"] if plaintext else [])]
    return {"image": IMAGE, "command": command, "network_mode": "host", "restart": "unless-stopped",
            "healthcheck": {"test": check, "interval": "10s", "timeout": "5s",
                            "retries": 3, "start_period": start_period}}


def _gpus(device_ids: list[int] | None) -> dict:
    device = {"driver": "nvidia", "capabilities": ["gpu"]}
    device.update({"device_ids": [str(g) for g in device_ids]} if device_ids is not None else {"count": "all"})
    return {"resources": {"reservations": {"devices": [device]}}}


def _healthy(*names: str) -> dict:
    return {name: {"condition": "service_healthy"} for name in names}


def _redis(address: str, tls: bool) -> dict:
    """Redis admits only the deployment's ACL user (its --aclfile, `distserve redis-acl`); across hosts it speaks
    TLS only, to clients whose certificate the deployment's CA signed. The health check logs in as that user,
    the password read from the ACL file into redis-cli's stdin (never onto a command line)."""
    acl = f"{RUN}/{REDIS_ACL}"
    ca, cert, key = (f"{RUN}/{TLS[field]}" for field in ("ca", "cert", "key"))
    listen = (["--port", "0", "--tls-port", str(REDIS_PORT), "--tls-cert-file", cert, "--tls-key-file", key,
               "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes"] if tls else ["--port", str(REDIS_PORT)])
    cli = f"redis-cli --user {REDIS_USER} --askpass -h {address} -p {REDIS_PORT}"
    cli += f" --tls --cacert {ca} --cert {cert} --key {key}" if tls else ""
    check = f"sed -n 's/.*>\\([^ ]*\\) .*/\\1/p' {acl} | {cli} ping | grep -q PONG"
    return {"image": REDIS_IMAGE, "network_mode": "host", "restart": "unless-stopped",
            "command": ["redis-server", "--bind", address, *listen, "--appendonly", "yes", "--aclfile", acl],
            "volumes": ["redis-data:/data"], "secrets": [REDIS_ACL, *(TLS.values() if tls else ())],
            "healthcheck": {"test": ["CMD-SHELL", check], "interval": "5s", "timeout": "3s", "retries": 10}}


def _redis_url(address: str, tls: bool) -> str:
    """The URL every service dials: the deployment's user (the password filled in by each), TLS across hosts."""
    return f"{'rediss' if tls else 'redis'}://{REDIS_USER}@{address}:{REDIS_PORT}/0"


def _head_services(address: str, redis_url: str, tls: bool) -> dict:
    router = _service(["distserve", "router", "--model", "/model", "--host", "0.0.0.0", "--grpc-port",
                       str(ROUTER_GRPC_PORT), "--http-port", str(ROUTER_HTTP_PORT), "--metrics-port",
                       str(ROUTER_METRICS_PORT), "--api-key-file", f"{RUN}/distserve_api_keys"],
                      f"127.0.0.1:{ROUTER_GRPC_PORT}", plaintext=True)
    router.update(environment={"DISTSERVE_ROUTER_REDIS_URL": redis_url,
                               "DISTSERVE_ROUTER_DRAIN_GRACE_S": str(defaults.DRAIN_GRACE_S)},
                  volumes=[MODEL_VOLUME], depends_on=_healthy("redis"), stop_grace_period=STOP_GRACE)
    planner = _service(["distserve", "planner", "--host", address, "--port", str(PLANNER_PORT), "--redis-url",
                        redis_url, "--admin-key-file", f"{RUN}/distserve_admin_keys"], f"http://{address}:{PLANNER_PORT}/docs")
    planner.update(depends_on=_healthy("redis"))
    return {"redis": _redis(address, tls), "router": router, "planner": planner}


def _kvxfer(address: str, node: int, across_hosts: bool) -> dict:
    """The host's kvxfer; across hosts its KV pulls go encrypted (UCX has no TLS of its own)."""
    encrypt = ["--encrypt-kv", "true"] if across_hosts else []
    kvxfer = _service(["distserve", "kvxfer", "--host", address, "--port", str(KVXFER_PORT), "--ucx-port",
                       str(KVXFER_UCX_PORT), "--metrics-port", str(KVXFER_METRICS_PORT), *encrypt],
                      f"{address}:{KVXFER_PORT}")
    # it maps the KV pools of every GPU of its host; it computes nothing, so it claims none for itself
    kvxfer.update(environment={"DISTSERVE_KVXFER_HOST_ID": f"node{node}"}, deploy=_gpus(None), **_shared_memory())
    return kvxfer


def rank_gpus(spec: InstanceSpec) -> list[tuple[int, int]]:
    """(node, GPU) of each rank, rank = pp_rank x TP + tp_rank: stage s's GPUs in order."""
    return [(stage.node, gpu) for stage in spec.stages for gpu in stage.gpus]


def _rendezvous(spec: InstanceSpec, addresses: tuple[str, ...]) -> str:
    node, slot = rank_gpus(spec)[0]
    return f"{addresses[node]}:{RENDEZVOUS_PORT + slot}"


def _instance(name: str, spec: InstanceSpec, addresses: tuple[str, ...], redis_url: str) -> dict:
    """Rank 0 of the instance (the instance itself: scheduler, gRPC service, its own GPU)."""
    node, slot = rank_gpus(spec)[0]
    address = addresses[node]
    # the reservation exposes only this GPU, numbered 0 inside the container
    command = ["distserve", spec.role, "--model", "/model", "--device", "cuda:0", "--host", address,
               "--port", str(INSTANCE_PORT + slot), "--metrics-port", str(INSTANCE_METRICS_PORT + slot),
               "--instance-id", name]
    if spec.tp * spec.pp > 1:
        command += [*spec.parallel_flags(), "--rendezvous", _rendezvous(spec, addresses)]
    service = _service(command, f"{address}:{INSTANCE_PORT + slot}", start_period="10m")
    service.update(
        environment={"DISTSERVE_REDIS_URL": redis_url, "DISTSERVE_KVXFER": f"{address}:{KVXFER_PORT}",
                     "DISTSERVE_DRAIN_GRACE_S": str(defaults.DRAIN_GRACE_S),
                     "DISTSERVE_NODE": f"node{node}", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        volumes=[MODEL_VOLUME], deploy=_gpus([slot]), labels={LABEL: spec_json(spec)},
        depends_on={"kvxfer": {"condition": "service_healthy", "restart": True},
                    **(_healthy("redis") if node == 0 else {})},
        stop_grace_period=STOP_GRACE, **_shared_memory())
    return service


def _rank(spec: InstanceSpec, rank: int, addresses: tuple[str, ...]) -> dict:
    """Rank 1..N-1 of a TP/PP instance: one GPU, joining rank 0 at its rendezvous (on this host or another).

    It serves nothing itself, so it has no health check: its instance's is rank 0's, which stops serving and
    deregisters when a rank exits; compose then restarts the rank, which joins the restarted rank 0."""
    node, gpu = rank_gpus(spec)[rank]
    # its host's kvxfer: rank 0 registers and leases this rank's pool there (a stage on another node)
    return {"image": IMAGE, "command": ["distserve", "rank", "--rendezvous", _rendezvous(spec, addresses),
                                        "--rank", str(rank), "--device", "cuda:0", "--model", "/model",
                                        "--kvxfer", f"{addresses[node]}:{KVXFER_PORT}"],
            "network_mode": "host", "restart": "unless-stopped", "healthcheck": {"disable": True},
            "environment": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "volumes": [MODEL_VOLUME],
            "deploy": _gpus([gpu]), "stop_grace_period": "60s", **_shared_memory()}


def compose_files(instances: Mapping[str, InstanceSpec], addresses: tuple[str, ...]) -> dict[str, dict]:
    """One compose document per host (file name → document): Redis, router and planner on the first host, a
    kvxfer on every host, each instance (its rank 0) on the host of its first stage, and a service per other
    rank of a TP/PP instance on the host of its stage, each pinned to its GPU."""
    for name, spec in instances.items():
        gpu_ranks(spec, "compose")
        nodes = sorted({stage.node for stage in spec.stages})
        if nodes[-1] >= len(addresses):
            raise ValueError(f"compose: {name} is on node {nodes[-1]}, but there are {len(addresses)} node addresses")
    tls = len(addresses) > 1  # internal traffic crosses hosts: mutual TLS, Redis over TLS, KV pulls encrypted
    url = _redis_url(addresses[0], tls)
    files = {}
    extra = {"router": ("distserve_api_keys",), "planner": ("distserve_admin_keys",)}
    for node, address in enumerate(addresses):
        services = _head_services(address, url, tls) if node == 0 else {}
        services["kvxfer"] = _kvxfer(address, node, tls)
        here = sorted((gpu, rank, name) for name, spec in instances.items()
                      for rank, (n, gpu) in enumerate(rank_gpus(spec)) if n == node)
        services.update({(f"{name}-rank{rank}" if rank else name):
                         (_rank(instances[name], rank, addresses) if rank
                          else _instance(name, instances[name], addresses, url)) for _, rank, name in here})
        services = {name: with_credentials(s, tls, *extra.get(name, ())) if s["image"] == IMAGE else s
                    for name, s in services.items()}
        doc = {"name": "distserve", "services": services, "secrets": secrets_section(tls)}
        if node == 0:
            doc["volumes"] = {"redis-data": {}}
        files[file_name(node)] = doc
    return files


def instances_of(doc: dict) -> dict[str, InstanceSpec]:
    """The instances a compose document runs, read back from their labels."""
    found = {}
    for name, service in doc.get("services", {}).items():
        label = service.get("labels", {}).get(LABEL)
        if label is not None:
            found[name] = spec_of(label)
    return found


def to_yaml(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


def write_files(files: Mapping[str, dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        (out / name).write_text("# Written by distserve's compose actuator (`distserve plan --emit compose`, or the\n"
                                "# planner's replans with --compose-out). On this host:\n"
                                f"#   docker compose -f {name} up -d --remove-orphans\n" + to_yaml(doc))
