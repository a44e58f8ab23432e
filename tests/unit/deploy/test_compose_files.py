"""Every compose document (deploy/docker-compose.yml and emitted ones, one per host) is one a user can bring up:
valid Compose, commands the CLI accepts, no GPU or port claimed twice, health checks that ask the right port."""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import get_args
from urllib.parse import urlsplit

import jsonschema
import pytest

from services.cli import build_parser
from services.common.secret import SECRET_ENV
from services.common.settings_cli import settings_values
from services.common.tls import ENV as TLS_ENV
from services.instance.config import InstanceSettings, Role
from services.kvxfer.config import KVXferConfig
from services.router.config import RouterSettings

ROLES = get_args(Role)
SETTINGS = {"router": RouterSettings, "kvxfer": KVXferConfig, **{role: InstanceSettings for role in ROLES}}
PROCESS_WIDE = {SECRET_ENV, *TLS_ENV.values()}  # read by every process (secret.py, tls.py), no one setting's
PORT_FLAGS = ("port", "grpc_port", "http_port", "metrics_port", "ucx_port")


def distserve_services(doc: dict) -> dict:
    return {name: s for name, s in doc["services"].items() if s.get("command", [None])[0] == "distserve"}


def parse(command: list[str]):
    assert command[0] == "distserve"
    return build_parser().parse_args(command[1:])


def ports_of(service: dict) -> set[int]:
    command = service["command"]
    if command[0] == "redis-server":
        flag = "--tls-port" if "--tls-port" in command else "--port"
        return {int(command[command.index(flag) + 1])}
    args = parse(command)
    return {getattr(args, flag) for flag in PORT_FLAGS if getattr(args, flag, None)}


def test_validates_against_the_compose_specification(host_doc: dict, compose_schema: dict) -> None:
    jsonschema.Draft7Validator(compose_schema).validate(host_doc)  # the schema is draft-07


def test_every_command_parses_and_with_its_environment_makes_valid_settings(
        host_doc: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, service in distserve_services(host_doc).items():
        args = parse(service["command"])
        if not service["healthcheck"].get("disable"):
            parse(service["healthcheck"]["test"][1:])
        settings = SETTINGS.get(args.command)
        if settings is None:  # the planner takes flags only
            continue
        for key in [k for k in os.environ if k.startswith("DISTSERVE_")]:
            monkeypatch.delenv(key)
        prefix = settings.model_config["env_prefix"]
        for key, value in service.get("environment", {}).items():
            if key.startswith("DISTSERVE_") and key not in PROCESS_WIDE:
                assert key.startswith(prefix) and key[len(prefix):].lower() in settings.model_fields, \
                    f"{name}: {key} is no setting of `distserve {args.command}`; it would be ignored"
            monkeypatch.setenv(key, value)
        values = settings_values(args, settings)
        made = settings(role=args.command, **values) if settings is InstanceSettings else settings(**values)
        if settings is InstanceSettings:
            assert made.redis_url and made.kvxfer and made.instance_id == name
        if settings is RouterSettings:
            assert made.redis_url


def test_no_two_instances_claim_the_same_gpu(host_doc: dict) -> None:
    claimed: dict[str, str] = {}
    for name, service in host_doc["services"].items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        command = service.get("command", [])
        if len(command) > 1 and command[1] in (*ROLES, "rank"):  # an instance (its rank 0), or another rank of it
            (device,) = devices
            ids = device["device_ids"]
            assert ids, name
            for gpu in ids:
                assert gpu not in claimed, f"GPU {gpu} claimed by {claimed.get(gpu)} and {name}"
                claimed[gpu] = name
            index = int(parse(command).device.removeprefix("cuda:"))
            assert index < len(ids), f"{name} computes on a GPU outside its reservation"
        elif devices:  # kvxfer maps the pools of every GPU of its host and claims none for computing
            assert name == "kvxfer" and devices == [{"driver": "nvidia", "capabilities": ["gpu"], "count": "all"}]
    assert claimed


def test_no_two_services_listen_on_the_same_port(host_doc: dict) -> None:
    seen: dict[int, str] = {}
    for name, service in host_doc["services"].items():
        for port in ports_of(service):
            assert port not in seen, f"port {port} used by {seen.get(port)} and {name}"
            seen[port] = name
    assert all(s["network_mode"] == "host" for s in host_doc["services"].values())


def test_health_checks_ask_where_each_service_listens(host_doc: dict) -> None:
    for name, service in host_doc["services"].items():
        if service["healthcheck"].get("disable"):  # a TP/PP rank serves nothing: its instance's health is rank 0's
            assert service["command"][1] == "rank", name
            continue
        test = service["healthcheck"]["test"]
        if test[0] == "CMD-SHELL":  # Redis's: redis-cli logs in, its password piped in from the ACL file
            cli = shlex.split(test[1].split(" | ")[1])
            host, port = cli[cli.index("-h") + 1], int(cli[cli.index("-p") + 1])
            bound = service["command"][service["command"].index("--bind") + 1]
        else:
            target = urlsplit(test[3] if "://" in test[3] else f"grpc://{test[3]}")
            host, port = target.hostname, target.port
            bound = parse(service["command"]).host
        assert port in ports_of(service), f"{name} is checked on port {port}"
        assert host == bound or (bound == "0.0.0.0" and host == "127.0.0.1"), f"{name} binds {bound}, checked at {host}"


def test_services_wait_for_what_they_depend_on_to_be_healthy(host_doc: dict) -> None:
    services = host_doc["services"]
    for name, service in services.items():
        for dependency, how in service.get("depends_on", {}).items():
            assert how["condition"] == "service_healthy", name
            assert "healthcheck" in services[dependency], dependency
        assert service["restart"] == "unless-stopped"


def test_every_distserve_service_gets_the_deployment_secret_and_mtls_across_hosts(host_doc: dict) -> None:
    kvxfer = parse(host_doc["services"]["kvxfer"]["command"])
    multi_host = kvxfer.host != "127.0.0.1"  # node addresses: several hosts
    assert (kvxfer.encrypt_kv == "true") == multi_host  # KV pulls encrypted only where they cross hosts
    for name, service in distserve_services(host_doc).items():
        assert service["environment"][SECRET_ENV] == "/run/secrets/distserve_secret", name
        assert set(service["secrets"]) <= host_doc["secrets"].keys()
        assert (TLS_ENV["ca"] in service["environment"]) == multi_host, name
    router = host_doc["services"].get("router")
    if router is not None:
        assert parse(router["command"]).api_key_file and router["healthcheck"]["test"][-1] == "--plaintext"
        planner = parse(host_doc["services"]["planner"]["command"])
        assert planner.admin_key_file and planner.host != "0.0.0.0"


def test_redis_admits_only_the_deployments_user_and_speaks_tls_across_hosts(host_doc: dict) -> None:
    multi_host = parse(host_doc["services"]["kvxfer"]["command"]).host != "127.0.0.1"
    urls = [url for s in distserve_services(host_doc).values() for key, url in s.get("environment", {}).items()
            if key.endswith("REDIS_URL")]
    urls += [parse(s["command"]).redis_url for s in distserve_services(host_doc).values()
             if s["command"][1] == "planner"]
    assert urls and {urlsplit(url).scheme for url in urls} == {"rediss" if multi_host else "redis"}
    assert {urlsplit(url).username for url in urls} == {"distserve"} and all(urlsplit(u).password is None for u in urls)
    redis = host_doc["services"].get("redis")
    if redis is None:  # Redis runs on the first host only
        return
    command, check = redis["command"], redis["healthcheck"]["test"][1]
    assert command[command.index("--aclfile") + 1] == "/run/secrets/distserve_redis_acl"
    assert "distserve_redis_acl" in redis["secrets"] and "distserve_redis_acl" in host_doc["secrets"]
    assert "--askpass" in check and "distserve_redis_acl" in check  # the check logs in, no password on its line
    if multi_host:
        assert command[command.index("--port") + 1] == "0" and command[command.index("--tls-auth-clients") + 1] == "yes"
        assert {command[command.index(flag) + 1] for flag in ("--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file")} \
            == {f"/run/secrets/distserve_tls_{name}" for name in ("cert", "key", "ca")} <= {f"/run/secrets/{s}" for s in redis["secrets"]}
        assert "--tls" in check.split()
    else:
        assert "--tls-port" not in command and command[command.index("--bind") + 1] == "127.0.0.1"


def test_compose_variables_are_the_documented_ones_with_defaults(host_doc: dict) -> None:
    text = json.dumps(host_doc)
    assert set(re.findall(r"\$\{(\w+):-[^}]+\}", text)) <= {"DISTSERVE_IMAGE", "DISTSERVE_MODEL_DIR", "DISTSERVE_SECRET_FILE",
                                                          "DISTSERVE_API_KEY_FILE", "DISTSERVE_ADMIN_KEY_FILE",
                                                          "DISTSERVE_TLS_DIR", "DISTSERVE_REDIS_ACL_FILE"}
    assert text.count("$") == len(re.findall(r"\$\{\w+:-[^}]+\}", text)), "a variable without a default"
