"""Shared by the deployment tests: the repository root, node addresses, and emitted compose documents."""

from __future__ import annotations

from pathlib import Path

from services.deploy.compose import compose_files, named_instances
from services.planner.placement import Cluster, Parallel, pack

ROOT = Path(__file__).resolve().parents[3]
ADDRESSES = ("10.0.0.1", "10.0.0.2")


def emitted(nodes: int, prefill: Parallel, n_prefill: int, decode: Parallel, n_decode: int) -> dict[str, dict]:
    placement = pack(Cluster(nodes=nodes, gpus_per_node=8), prefill, n_prefill, decode, n_decode)
    return compose_files(named_instances(placement), ADDRESSES[:nodes] if nodes > 1 else ("127.0.0.1",))
