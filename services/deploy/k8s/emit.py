"""`distserve plan ... --emit k8s --out DIR`: the placement's kustomize tree, checked for Alg. 2's co-location."""

from __future__ import annotations

import argparse
from pathlib import Path

from services.deploy.compose import named_instances
from services.deploy.k8s.colocation import colocation_problems
from services.deploy.k8s.manifests import all_objects, kustomize_tree, write_tree
from services.planner.placement import Placement


def emit_k8s(args: argparse.Namespace, placement: Placement) -> int:
    if not args.out:
        print("error: --emit k8s needs --out DIR")
        return 2
    objects = all_objects(named_instances(placement), args.redis_url)
    problems = colocation_problems(objects, all_paired=args.algorithm == "low-affinity")
    if problems:
        print("error: the manifests would not keep Alg. 2's co-location:\n  " + "\n  ".join(problems))
        return 2
    out = Path(args.out)
    write_tree(kustomize_tree(objects, args.namespace, args.image), out)
    kinds = sorted({o["kind"] for o in objects})
    print(f"kubernetes manifests in {out}: {len(objects)} objects ({', '.join(kinds)})")
    print(f"  fill {out}/overlays/default/secrets/ (README there), then: kubectl apply -k {out}/overlays/default")
    print("  needs the LeaderWorkerSet controller for instances spanning nodes, and Prometheus Operator's CRDs")
    return 0
