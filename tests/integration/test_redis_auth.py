"""The launcher's Redis admits only the deployment's user with the password derived from the secret."""

from __future__ import annotations

import pytest
import redis

from services.common.redis_auth import redis_password, resolve_url
from services.common.redis_server import EmbeddedRedis
from services.common.registry import InstanceInfo, Registry
from services.common.secret import SECRET_ENV, ensure_secret, read_secret


async def test_redis_refuses_commands_without_the_deployment_password(tmp_path, monkeypatch) -> None:
    path = ensure_secret(tmp_path / "secret")
    monkeypatch.setenv(SECRET_ENV, str(path))
    server = EmbeddedRedis(password=redis_password(read_secret(path))).start()
    try:
        assert ":" not in server.url.split("//", 1)[1].split("@", 1)[0]  # the URL names the user only
        anonymous = redis.Redis(host=server.host, port=server.port)
        wrong = redis.Redis(host=server.host, port=server.port, username="distserve", password="guess")
        for client in (anonymous, wrong):
            with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
                client.set("ds:inst:forged", "{}")
        registry = Registry.from_url(server.url)
        await registry.register(InstanceInfo("p0", "prefill", "127.0.0.1:1", "n0", "cpu", ""))
        assert [i.id for i in await registry.instances()] == ["p0"]  # the forged key never landed
        await registry.close()
        assert redis.Redis.from_url(resolve_url(server.url)).exists("ds:inst:forged") == 0
    finally:
        server.stop()
