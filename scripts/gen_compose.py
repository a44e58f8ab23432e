"""Writes deploy/docker-compose.yml: the compose emitter's file for one 8-GPU host running 4 prefill and 4 decode
instances of one GPU each, and its monitoring files (docker-compose.monitoring.yml, prometheus/, grafana/). A test
fails when a committed file differs from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.deploy.compose import compose_files, named_instances, to_yaml  # noqa: E402
from services.deploy.compose_monitoring import monitoring_files  # noqa: E402
from services.planner.placement import Cluster, Parallel, pack  # noqa: E402

HEADER = """\
# distserve on one 8-GPU host: Redis, router, planner, kvxfer, 4 prefill (GPUs 0-3) and 4 decode (GPUs 4-7).
# Written by scripts/gen_compose.py; for another placement or several hosts run
#   distserve plan --model M --hardware H --nodes N --gpus-per-node G --emit compose --out DIR
# Bring-up (deploy/README.md):
#   docker build -f deploy/Dockerfile -t distserve:latest .
#   DISTSERVE_MODEL_DIR=/path/to/hf-model docker compose -f deploy/docker-compose.yml up -d
# Variables: DISTSERVE_IMAGE (default distserve:latest), DISTSERVE_MODEL_DIR (a Hugging Face model folder,
# default ./model beside this file). Router: gRPC 50051, OpenAI HTTP 8000; planner REST 8001.
"""


PLACEMENT = pack(Cluster(nodes=1, gpus_per_node=8), Parallel(1, 1), 4, Parallel(1, 1), 4)


def render() -> str:
    (doc,) = compose_files(named_instances(PLACEMENT), ("127.0.0.1",)).values()
    return HEADER + to_yaml(doc)


def render_monitoring() -> dict[str, str]:
    """deploy/-relative path → text of each monitoring file."""
    return monitoring_files(named_instances(PLACEMENT), ("127.0.0.1",))


if __name__ == "__main__":
    deploy = Path(__file__).resolve().parents[1] / "deploy"
    (deploy / "docker-compose.yml").write_text(render())
    for relative, text in render_monitoring().items():
        (deploy / relative).parent.mkdir(parents=True, exist_ok=True)
        (deploy / relative).write_text(text)
    print(deploy)
