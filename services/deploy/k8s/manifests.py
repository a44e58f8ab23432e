"""`distserve plan --emit k8s --out DIR`: the placement as a kustomize base (one object per file) and an
overlay that names the namespace, the image and the Secrets' files.

    DIR/base/kustomization.yaml, DIR/base/<kind>-<name>.yaml
    DIR/overlays/default/kustomization.yaml, namespace.yaml, secrets/  (kubectl apply -k DIR/overlays/default)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from services.deploy.k8s.base import base_objects, redis_url
from services.deploy.k8s.instances import SECRETS, instance_object
from services.planner.actuation import InstanceSpec

NAMESPACE = "distserve"
SECRET_FILES = {  # Secret → its files in the overlay's secrets/ folder (key=file), as kustomize reads them
    "distserve-deployment-secret": ["secret=secrets/deployment-secret"],
    "distserve-api-keys": ["api-keys=secrets/api-keys"],
    "distserve-admin-keys": ["admin-keys=secrets/planner-admin-keys"],
    "distserve-redis-acl": ["redis.acl=secrets/redis.acl"],
    "distserve-router-tls": ["tls.crt=secrets/router.pem", "tls.key=secrets/router.key"],
}
SECRETS_README = """\
The Secrets' files, read by kustomize's secretGenerator (keep them out of version control):
  mkdir -m 700 -p secrets
  head -c 32 /dev/urandom | xxd -p -c 64 > secrets/deployment-secret   # internal tokens, kvxfer owners, Redis
  distserve redis-acl --secret-file secrets/deployment-secret --out secrets/redis.acl
  distserve api-key add --file secrets/api-keys --name app             # the router's client API keys
  distserve api-key add --file secrets/planner-admin-keys --name ops   # the planner's admin keys
  secrets/router.pem, secrets/router.key: the router's TLS certificate and key for its client ports
"""


def instance_objects(instances: Mapping[str, InstanceSpec], external_redis: str = "") -> list[dict]:
    url = redis_url(external_redis)
    return [instance_object(name, spec, url) for name, spec in sorted(instances.items())]


def all_objects(instances: Mapping[str, InstanceSpec], external_redis: str = "") -> list[dict]:
    """Every object of the deployment: the stack's, then the instances'."""
    return [*base_objects(external_redis), *instance_objects(instances, external_redis)]


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True  # containers share their env lists: write each out, no YAML anchors


def _dump(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)


def kustomize_tree(objects: list[dict], namespace: str = NAMESPACE, image: str = "distserve:latest") -> dict[str, str]:
    """Relative path → text of every file: the base's objects and kustomization, and the default overlay."""
    files = {f"base/{file_name(obj)}": _dump(obj) for obj in objects}
    files["base/kustomization.yaml"] = _dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                              "resources": [file_name(obj) for obj in objects]})
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    secrets = [{"name": s, "files": SECRET_FILES[s], **({"type": "kubernetes.io/tls"} if s.endswith("-tls") else {})}
               for s in SECRETS]
    files["overlays/default/kustomization.yaml"] = _dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
        "resources": ["namespace.yaml", "../../base"],
        "images": [{"name": "distserve", "newName": name, "newTag": tag}],
        "generatorOptions": {"disableNameSuffixHash": True},  # the planner's actuator renders the same names
        "secretGenerator": secrets})
    files["overlays/default/namespace.yaml"] = _dump(namespace_object(namespace))
    files["overlays/default/secrets/README"] = SECRETS_README
    return files


def namespace_object(namespace: str) -> dict:
    """The namespace admits privileged pods: kvxfer and the instances share their node's IPC and PID namespaces."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}


def write_tree(files: Mapping[str, str], out: Path) -> None:
    for relative, text in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
