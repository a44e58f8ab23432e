import redis


def test_redis_fixture_is_a_real_server(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.zadd("ds:test", {"a": 3, "b": 1})
    assert client.zrange("ds:test", 0, 0) == [b"b"]
    assert client.info("server")["redis_version"]
