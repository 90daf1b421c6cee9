"""The error tree: stable reason codes, one class per code, the crawler's own errors kept apart
from bugs, and ``crawler``'s command line printing the former as one line and not the latter."""

from __future__ import annotations

import argparse

import pytest
import redis

from crawler import cli, errors
from crawler.cli import output as cli_output
from crawler.config.settings import SettingError
from crawler.errors import REASONS, ConfigError, CrawlerError, JobNotFound, Reason, StoreError
from crawler.store.base import StoreRefused, StoreUnavailable, StoreURLError
from crawler.store.place import StoreNotAllowed

# The codes as stored in the ``error`` column and counted as ``error:<code>``: never to change.
STORED = ("dns", "connect", "timeout", "http_5xx", "http_429", "tls", "http_4xx", "too_large", "redirect_loop",
          "too_many_redirects", "bad_url", "decode", "unsupported_encoding", "protocol", "blocked_network",
          "out_of_scope", "robots", "not_html", "refused_type", "lease_expired", "robots_unavailable", "internal")
ABSTRACT = {Reason.ERROR, Reason.RETRYABLE, Reason.PERMANENT}


def test_reason_codes_are_the_stored_strings() -> None:
    assert sorted(REASONS) == sorted(STORED)
    assert {r.value for r in Reason} - ABSTRACT == set(STORED)
    for code in STORED:
        assert Reason(code) == code and f"{Reason(code)}" == code and str(Reason(code)) == code


def test_every_code_has_its_own_class() -> None:
    for code, cls in REASONS.items():
        assert cls.reason == code
        assert getattr(errors, cls.__name__) is cls and cls.__doc__
        assert issubclass(cls, errors.Retryable) != issubclass(cls, errors.Permanent)
    assert REASONS["timeout"] is errors.FetchTimeout
    assert REASONS["internal"] is errors.Internal and issubclass(errors.Internal, errors.Permanent)


def test_the_crawlers_own_errors_keep_their_builtin_bases() -> None:
    assert issubclass(JobNotFound, KeyError) and issubclass(JobNotFound, CrawlerError)
    assert issubclass(SettingError, ConfigError) and issubclass(ConfigError, ValueError)
    assert issubclass(StoreURLError, ValueError) and issubclass(StoreURLError, StoreError)
    assert issubclass(StoreNotAllowed, StoreRefused) and issubclass(StoreRefused, StoreURLError)
    assert issubclass(StoreUnavailable, StoreError) and not issubclass(StoreUnavailable, ValueError)
    assert issubclass(StoreError, CrawlerError) and issubclass(errors.CrawlError, CrawlerError)


def _run(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> int:
    def command(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(cli_output, "cmd_settings", command)  # bound when main builds its parser
    return cli.main(["settings"])


@pytest.mark.parametrize("exc, code, line", [
    (JobNotFound("no such job: j1"), 2, "crawler settings: no such job: j1"),
    (ConfigError("--timeout must be a finite number"), 2, "crawler settings: --timeout must be a finite number"),
    (errors.BadURL("seed 'x': no host"), 2, "crawler settings: seed 'x': no host"),
    (StoreUnavailable("postgresql: down"), 1, "crawler settings: StoreUnavailable: postgresql: down"),
    (PermissionError("no access"), 1, "crawler settings: PermissionError: no access"),
    # A node of a Redis Cluster named as a plain Redis: whichever way it refuses, the line says how
    # to name it (a transaction's keys in several of its slots draw CROSSSLOT, not MOVED).
    (redis.exceptions.MovedError("3999 127.0.0.1:7001"), 2,
     "crawler settings: Redis answered MOVED 3999 127.0.0.1:7001: it is a node of a Redis Cluster; name it (and "
     "other nodes) as redis+cluster://host:port,host:port"),
    (redis.exceptions.ClusterCrossSlotError("Keys in request don't hash to the same slot"), 2,
     "crawler settings: Redis answered CROSSSLOT (Keys in request don't hash to the same slot): it is a node of "
     "a Redis Cluster; name it (and other nodes) as redis+cluster://host:port,host:port"),
])
def test_the_crawlers_own_errors_end_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 exc: BaseException, code: int, line: str) -> None:
    assert _run(monkeypatch, exc) == code
    assert capsys.readouterr().err.strip() == line


@pytest.mark.parametrize("exc", [KeyError("k"), ValueError("v"), TypeError("t"), RuntimeError("r")])
def test_a_stray_exception_from_a_command_is_not_swallowed(monkeypatch: pytest.MonkeyPatch,
                                                           exc: Exception) -> None:
    with pytest.raises(type(exc)) as raised:
        _run(monkeypatch, exc)
    assert raised.value is exc
