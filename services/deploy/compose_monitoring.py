"""Prometheus and Grafana beside a compose deployment: docker-compose.monitoring.yml for the first host, the
scrape config of every host's metrics endpoints, and Grafana provisioned with the distserve dashboard.

Both listen on the first host's loopback only (reach them through an SSH tunnel, or change the addresses);
Grafana's admin password is a compose secret (./secrets/grafana-admin-password).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from services.deploy.compose import (
    INSTANCE_METRICS_PORT,
    KVXFER_METRICS_PORT,
    PLANNER_PORT,
    ROUTER_METRICS_PORT,
    rank_gpus,
    to_yaml,
)
from services.deploy.observability import dashboard, grafana_provisioning, scrape_config
from services.planner.actuation import InstanceSpec

FILE = "docker-compose.monitoring.yml"
PROMETHEUS_IMAGE, GRAFANA_IMAGE = "prom/prometheus:v2.53.0", "grafana/grafana:11.1.0"
PROMETHEUS_PORT, GRAFANA_PORT = 9090, 3000


def targets(instances: Mapping[str, InstanceSpec], addresses: tuple[str, ...]) -> dict[str, list[str]]:
    """Each component's metrics endpoints host:port: what compose_files starts, where."""
    found: dict[str, list[str]] = {"router": [f"{addresses[0]}:{ROUTER_METRICS_PORT}"],
                                   "planner": [f"{addresses[0]}:{PLANNER_PORT}"],
                                   "kvxfer": [f"{a}:{KVXFER_METRICS_PORT}" for a in addresses]}
    for _, spec in sorted(instances.items()):
        node, slot = rank_gpus(spec)[0]
        found.setdefault(spec.role, []).append(f"{addresses[node]}:{INSTANCE_METRICS_PORT + slot}")
    return found


def monitoring_compose() -> dict:
    ready = ["CMD", "wget", "-q", "-O", "/dev/null", f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready"]
    prometheus = {"image": PROMETHEUS_IMAGE, "network_mode": "host", "restart": "unless-stopped",
                  "command": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                              f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"],
                  "volumes": ["./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro", "prometheus-data:/prometheus"],
                  "healthcheck": {"test": ready, "interval": "10s", "timeout": "5s", "retries": 3}}
    health = ["CMD", "wget", "-q", "-O", "/dev/null", f"http://127.0.0.1:{GRAFANA_PORT}/api/health"]
    grafana = {"image": GRAFANA_IMAGE, "network_mode": "host", "restart": "unless-stopped",
               "environment": {"GF_SERVER_HTTP_ADDR": "127.0.0.1", "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
                               "GF_SECURITY_ADMIN_PASSWORD__FILE": "/run/secrets/grafana_admin_password",
                               "GF_AUTH_ANONYMOUS_ENABLED": "false"},
               "volumes": ["./grafana/provisioning:/etc/grafana/provisioning:ro",
                           "./grafana/dashboards:/var/lib/grafana/dashboards:ro", "grafana-data:/var/lib/grafana"],
               "secrets": ["grafana_admin_password"],
               "depends_on": {"prometheus": {"condition": "service_healthy"}},
               "healthcheck": {"test": health, "interval": "10s", "timeout": "5s", "retries": 3}}
    return {"name": "distserve-monitoring", "services": {"prometheus": prometheus, "grafana": grafana},
            "secrets": {"grafana_admin_password": {"file": "${DISTSERVE_GRAFANA_PASSWORD_FILE:-./secrets/grafana-admin-password}"}},
            "volumes": {"prometheus-data": {}, "grafana-data": {}}}


def monitoring_files(instances: Mapping[str, InstanceSpec], addresses: tuple[str, ...]) -> dict[str, str]:
    """Relative path → text of every monitoring file, beside the hosts' compose files."""
    header = f"# Prometheus and Grafana for distserve, on the first host:\n#   docker compose -f {FILE} up -d\n"
    files = {FILE: header + to_yaml(monitoring_compose()),
             "prometheus/prometheus.yml": to_yaml(scrape_config(targets(instances, addresses))),
             "grafana/dashboards/distserve.json": json.dumps(dashboard(), indent=1) + "\n"}
    provisioning = grafana_provisioning(f"http://127.0.0.1:{PROMETHEUS_PORT}", "/var/lib/grafana/dashboards")
    files.update({f"grafana/provisioning/{path}": to_yaml(doc) for path, doc in provisioning.items()})
    return files


def write_monitoring(instances: Mapping[str, InstanceSpec], addresses: tuple[str, ...], out: Path) -> None:
    for relative, text in monitoring_files(instances, addresses).items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_text(text)
