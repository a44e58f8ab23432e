"""What an operator watches: the Grafana dashboard (one panel per figure, each a PromQL query over metrics the
services export: services/common/metrics.py, services/router/slo_metrics.py, services/kvxfer/metrics.py and the
planner's), the Prometheus scrape config of a deployment's metrics endpoints, and Grafana's provisioning files.

The services' own `instance` label (the distserve instance id) is kept over Prometheus's target label
(`honor_labels`), so the per-instance panels name instances as the router and the planner do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RATE = "1m"
DATASOURCE = {"type": "prometheus", "uid": "distserve-prometheus"}


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    targets: tuple[tuple[str, str], ...]  # (legend, PromQL)
    unit: str = "short"
    stacked: bool = False


def _quantiles(metric: str, by: str = "") -> tuple[tuple[str, str], ...]:
    labels = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple((f"{legend}p{int(q * 100)}", f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket[{RATE}])))")
                 for q in (0.5, 0.9, 0.99))


PANELS = (
    Panel("TTFT", _quantiles("distserve_ttft_seconds"), "s"),
    Panel("TPOT", _quantiles("distserve_tpot_seconds"), "s"),
    Panel("SLO attainment (last requests)", (("{{phase}} {{source}}", "distserve_slo_attainment"),), "percentunit"),
    Panel("Requests by outcome", (("{{outcome}}", f"sum by (outcome) (rate(distserve_requests_total[{RATE}]))"),), "reqps"),
    Panel("Latency breakdown (paper Fig. 10): mean seconds per request by stage",
          (("{{stage}}", f"sum by (stage) (rate(distserve_stage_seconds_sum[{RATE}])) / "
                         f"sum by (stage) (rate(distserve_stage_seconds_count[{RATE}]))"),), "s", stacked=True),
    Panel("Queue per instance", (("{{instance}}", "distserve_queue_length"),)),
    Panel("Running per instance", (("{{instance}}", "distserve_running"),)),
    Panel("KV blocks used per instance", (("{{instance}}", "distserve_kv_blocks_used / distserve_kv_blocks_total"),),
          "percentunit"),
    Panel("KV transfer time", _quantiles("distserve_kvxfer_pull_seconds", "path"), "s"),
    Panel("KV transfer bytes", (("{{path}}", f"sum by (path) (rate(distserve_kvxfer_pulled_bytes_total[{RATE}]))"),), "Bps"),
    Panel("Admission decisions", (("{{decision}}", f"sum by (decision) (rate(distserve_admission_total[{RATE}]))"),), "reqps"),
    Panel("Latency model's live error (measured - predicted)",
          (("TTFT median", f"histogram_quantile(0.5, sum by (le) (rate(distserve_slo_ttft_error_seconds_bucket[{RATE}])))"),
           ("TPOT median", f"histogram_quantile(0.5, sum by (le) (rate(distserve_slo_tpot_error_seconds_bucket[{RATE}])))")), "s"),
    Panel("Planner: predicted goodput per GPU of the current plan", (("goodput", "distserve_planner_goodput_per_gpu"),), "reqps"),
)


def dashboard() -> dict:
    """The Grafana dashboard (JSON model), two panels a row."""
    panels = []
    for i, panel in enumerate(PANELS):
        stack = {"stacking": {"mode": "normal"}, "fillOpacity": 60} if panel.stacked else {}
        panels.append({
            "id": i + 1, "type": "timeseries", "title": panel.title, "datasource": DATASOURCE,
            "gridPos": {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8},
            "fieldConfig": {"defaults": {"unit": panel.unit, "custom": stack}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
                        for j, (legend, expr) in enumerate(panel.targets)]})
    return {"uid": "distserve", "title": "distserve", "tags": ["distserve"], "schemaVersion": 39, "version": 1,
            "time": {"from": "now-30m", "to": "now"}, "refresh": "10s", "panels": panels}


def scrape_config(targets: Mapping[str, list[str]], interval: str = "15s") -> dict:
    """Prometheus's configuration: a job per component (router, prefill, decode, kvxfer, planner), its targets
    host:port (the planner's metrics are on its REST port)."""
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": f"distserve-{job}", "honor_labels": True, "metrics_path": "/metrics",
                                "static_configs": [{"targets": list(addresses)}]}
                               for job, addresses in targets.items() if addresses]}


def grafana_provisioning(prometheus_url: str, dashboards_path: str) -> dict[str, dict]:
    """Grafana's provisioning files (relative path → document): the Prometheus data source and the dashboards."""
    return {"datasources/prometheus.yml": {"apiVersion": 1, "datasources": [
                {"name": "Prometheus", "type": "prometheus", "uid": DATASOURCE["uid"], "access": "proxy",
                 "url": prometheus_url, "isDefault": True}]},
            "dashboards/distserve.yml": {"apiVersion": 1, "providers": [
                {"name": "distserve", "type": "file", "options": {"path": dashboards_path}}]}}
