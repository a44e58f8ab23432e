"""`distserve plan ... --emit compose --out DIR`: the plan's compose files, one per host, through the compose
actuator (so a replan into the same folder keeps the services that still fit); `distserve planner --compose-out
DIR`: the planner service applies its replans to the compose files in DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

from services.deploy.compose import (
    compose_files,
    file_name,
    named_instances,
    node_addresses,
)
from services.deploy.compose_actuator import ComposeActuator
from services.deploy.compose_monitoring import FILE as MONITORING_FILE
from services.deploy.k8s.emit import emit_k8s
from services.deploy.k8s.kube_actuator import ClusterApi, KubeActuator
from services.planner.actuation import apply_placement
from services.planner.placement import Placement


def add_emit_arguments(plan: argparse.ArgumentParser) -> None:
    plan.add_argument("--emit", choices=["compose", "k8s"], default=None, help="also write deployment files for the plan "
                      "(compose: one file per host; k8s: a kustomize base and overlay)")
    plan.add_argument("--out", default=None, help="folder of the emitted files (with --emit)")
    plan.add_argument("--node-addresses", default="",
                      help="comma-separated address of each node (default: 127.0.0.1 for one node, "
                           "else node0,node1,...)")
    plan.add_argument("--namespace", default="distserve", help="with --emit k8s: the overlay's namespace")
    plan.add_argument("--image", default="distserve:latest", help="with --emit k8s: the image (REGISTRY/NAME:TAG)")
    plan.add_argument("--redis-url", default="", help="with --emit k8s: an external Redis (default: one in the namespace)")


def add_actuator_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--compose-out", default=None,
                       help="apply replans to the compose files in this folder (one per node address)")
    serve.add_argument("--node-addresses", default="",
                       help="comma-separated address of each node, with --compose-out (default: 127.0.0.1)")
    serve.add_argument("--k8s-namespace", default="",
                       help="apply replans to the instances in this Kubernetes namespace (in-cluster credentials)")


def deployment_actuator(args: argparse.Namespace) -> ComposeActuator | KubeActuator | None:
    """The actuator `--k8s-namespace` or `--compose-out` asks for, if any."""
    return KubeActuator(ClusterApi(args.k8s_namespace)) if args.k8s_namespace else compose_actuator(args)


def compose_actuator(args: argparse.Namespace) -> ComposeActuator | None:
    """The actuator `--compose-out` asks for, if any."""
    if not args.compose_out:
        return None
    nodes = len(args.node_addresses.split(",")) if args.node_addresses else 1
    return ComposeActuator(Path(args.compose_out), node_addresses(nodes, args.node_addresses))


def emit(args: argparse.Namespace, placement: Placement) -> int:
    """Write (or update) the compose files (or the Kubernetes manifests) in args.out and say how to apply them."""
    if getattr(args, "emit", None) == "k8s":
        return emit_k8s(args, placement)
    if not args.out:
        print("error: --emit compose needs --out DIR")
        return 2
    try:
        addresses = node_addresses(args.nodes, args.node_addresses)
        compose_files(named_instances(placement), addresses)  # refuses an unsupported placement before any write
        actuator = ComposeActuator(Path(args.out), addresses)
        done = apply_placement(actuator, placement)
        actuator.write()  # also when nothing changed: the addresses may have
    except ValueError as err:
        print(f"error: {err}")
        return 2
    for role, par in (("prefill", placement.prefill), ("decode", placement.decode)):
        if par.gpus > 1:
            print(f"{role} instances (tp {par.tp} × pp {par.pp}): rank 0 is the instance's service, each other rank "
                  "a `-rankN` service on its stage's host with its GPU, joining rank 0 at its rendezvous port")
    print(f"compose files in {args.out}: started {len(done.started)}, stopped {len(done.stopped)}, "
          f"kept {len(done.kept)} instances")
    for node, address in enumerate(addresses):
        print(f"  on {address}: docker compose -f {Path(args.out) / file_name(node)} up -d --remove-orphans")
    print(f"  monitoring (first host): docker compose -f {Path(args.out) / MONITORING_FILE} up -d  "
          "(Prometheus 127.0.0.1:9090, Grafana 127.0.0.1:3000)")
    return 0
