"""A stand-in Kubernetes API server on loopback for the actuator's client tests: discovery for the kinds the
actuator uses, a store of Deployments and LeaderWorkerSets, pods that outlive a scale-down by a few polls, and a
log of every request (method, path, query, content type)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import yaml

GROUPS = {"apps/v1": [("deployments", "Deployment")], "leaderworkerset.x-k8s.io/v1": [("leaderworkersets", "LeaderWorkerSet")]}
CORE = [("pods", "Pod")]


@dataclass
class FakeKube:
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)  # (resource, name) → object
    pods_left: dict[str, int] = field(default_factory=dict)  # instance → pod listings still showing a pod
    log: list[tuple[str, str, dict, str]] = field(default_factory=list)


def _resources(pairs: list[tuple[str, str]], version: str) -> dict:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": version,
            "resources": [{"name": n, "singularName": n[:-1], "namespaced": True, "kind": k,
                           "verbs": ["create", "delete", "get", "list", "patch"]} for n, k in pairs]}


def _handler(state: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _reply(self, body: dict, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[str, list[str], dict]:
            url = urlparse(self.path)
            state.log.append((self.command, url.path, parse_qs(url.query), self.headers.get("Content-Type", "")))
            return url.path, url.path.strip("/").split("/"), parse_qs(url.query)

        def do_GET(self) -> None:
            path, parts, query = self._route()
            if path == "/api":
                return self._reply({"kind": "APIVersions", "versions": ["v1"]})
            if path == "/apis":
                return self._reply({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                    {"name": g.split("/")[0], "versions": [{"groupVersion": g, "version": g.split("/")[1]}],
                     "preferredVersion": {"groupVersion": g, "version": g.split("/")[1]}} for g in GROUPS]})
            if path == "/api/v1":
                return self._reply(_resources(CORE, "v1"))
            if len(parts) == 3 and parts[0] == "apis":
                return self._reply(_resources(GROUPS[f"{parts[1]}/{parts[2]}"], f"{parts[1]}/{parts[2]}"))
            resource = parts[-1]
            if resource == "pods":
                instance = query["labelSelector"][0].split("=", 1)[1]
                left = state.pods_left.get(instance, 0)
                state.pods_left[instance] = max(0, left - 1)
                items = [{"metadata": {"name": f"{instance}-pod"}}] if left else []
                return self._reply({"kind": "PodList", "apiVersion": "v1", "items": items})
            items = [o for (r, _), o in state.objects.items() if r == resource]
            return self._reply({"kind": "List", "apiVersion": "v1", "items": items})

        def do_PATCH(self) -> None:
            _, parts, _ = self._route()
            body = yaml.safe_load(self.rfile.read(int(self.headers["Content-Length"])))
            key = (parts[-2], parts[-1])
            if "apply-patch" in self.headers["Content-Type"]:
                state.objects[key] = body
            else:  # the drain's merge patch
                state.objects[key]["spec"]["replicas"] = body["spec"]["replicas"]
                state.pods_left[parts[-1]] = 2
            self._reply(state.objects[key])

        def do_DELETE(self) -> None:
            _, parts, _ = self._route()
            state.objects.pop((parts[-2], parts[-1]))
            self._reply({"kind": "Status", "apiVersion": "v1", "status": "Success"})

    return Handler


@contextmanager
def fake_kube() -> Iterator[tuple[FakeKube, str]]:
    """The fake's state and its URL."""
    state = FakeKube()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
