"""Which ``Host`` values the console answers (DNS rebinding), as pure functions."""

from __future__ import annotations

import pytest

from crawler.errors import ConfigError
from crawler.web.auth import Hosts, allowed_hosts, split_host


def test_host_headers_are_split_strictly() -> None:
    assert split_host("LocalHost:8089") == ("localhost", "8089")
    assert split_host("[::1]:8089") == ("[::1]", "8089")
    assert split_host("[::1]") == ("[::1]", "")
    assert split_host("console.example") == ("console.example", "")
    for bad in ("", ":8089", "::1", "a b", "evil.example:80:80", "evil.example:\uff18\uff10", "user@evil.example",
                "evil.example/", "[::1", "evil.example:123456"):
        assert split_host(bad) is None, bad


def test_loopback_names_always_and_nothing_else_by_default() -> None:
    hosts = Hosts.serving()
    for ok in ("localhost", "localhost:8089", "127.0.0.1:8089", "127.1.2.3", "[::1]:8089"):
        assert hosts.allows(ok), ok
    # A rebound name, however it looks: the attacker's own, or one that only starts like loopback.
    for bad in ("evil.example:8089", "127.0.0.1.evil.example", "localhost.evil.example", "localhost.", "0.0.0.0",
                "10.1.2.3", ""):
        assert not hosts.allows(bad), bad


def test_listen_address_and_allowed_hosts() -> None:
    env = {"CRAWLER_WEB_ALLOWED_HOSTS": " Console.Example , ops.example:8443,"}
    hosts = Hosts.serving("10.1.2.3", allowed_hosts(env))
    assert hosts.allows("10.1.2.3:8089") and hosts.allows("console.example") and hosts.allows("console.example:443")
    assert hosts.allows("ops.example:8443") and not hosts.allows("ops.example") and not hosts.allows("ops.example:1")
    assert not hosts.allows("10.1.2.4:8089") and not hosts.allows("sub.console.example")
    assert Hosts.serving("fd00::5").allows("[fd00::5]:8089") and Hosts.serving("[fd00::5]").allows("[fd00::5]")
    # Listening on every address: each local interface's, never a name from DNS.
    assert "127.0.0.1" in Hosts.serving("0.0.0.0").names
    with pytest.raises(ConfigError, match=r"CRAWLER_WEB_ALLOWED_HOSTS: 'https://console\.example' is not a host"):
        Hosts.serving(None, allowed_hosts({"CRAWLER_WEB_ALLOWED_HOSTS": "https://console.example"}))
