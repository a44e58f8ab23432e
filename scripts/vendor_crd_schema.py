"""Writes a CRD's storage-version openAPIV3Schema, descriptions dropped, as JSON for the offline manifest tests:
    python3 scripts/vendor_crd_schema.py CRD.yaml deploy/k8s/schemas/NAME.json"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    return [strip(v) for v in node] if isinstance(node, list) else node


if __name__ == "__main__":
    crd = yaml.safe_load(Path(sys.argv[1]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": version["name"],
              "openAPIV3Schema": strip(version["schema"]["openAPIV3Schema"])}
    Path(sys.argv[2]).write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
