"""Offline validation of Kubernetes manifests: built-in kinds by `kubernetes-validate` (strict: no unknown
fields), custom resources against the CRD schemas vendored in deploy/k8s/schemas/."""

from __future__ import annotations

import json
from functools import cache

import jsonschema

from tests.unit.deploy.deploy_cases import ROOT

KUBERNETES = "1.33.0"  # the oldest release the manifests support (pod affinity's matchLabelKeys is GA there)
CRDS = {("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.json",
        ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor.json"}


@cache
def _crd_validator(file: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads((ROOT / "deploy" / "k8s" / "schemas" / file).read_text())["openAPIV3Schema"])


def validate(obj: dict) -> None:
    """Raises when `obj` is not a valid object of its kind."""
    crd = CRDS.get((obj["apiVersion"], obj["kind"]))
    if crd is not None:
        _crd_validator(crd).validate(obj)
        return
    import kubernetes_validate

    kubernetes_validate.validate(obj, KUBERNETES, strict=True)
