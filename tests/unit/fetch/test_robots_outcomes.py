"""What each answer to ``/robots.txt`` makes of the origin's URLs, and for how long."""

from __future__ import annotations

import pytest

from crawler.errors import Reason
from crawler.fetch.robots import RobotsPolicy, policy_from_fetch

NOW = 1_000.0


def _policy(status: int | None, error: str | None, body: bytes = b"") -> RobotsPolicy:
    return policy_from_fetch(status, body, error, ttl=86_400, retry_ttl=300, unreachable_ttl=2, now=NOW)


@pytest.mark.parametrize("error", [Reason.CONNECT, Reason.DNS])
def test_a_robots_txt_no_server_took_fails_the_page_as_its_own_request_would_and_is_asked_again_soon(
        error: Reason) -> None:
    p = _policy(None, error)
    assert p.block_reason("http://h/a", "*") == error
    assert p.expires == NOW + 2


@pytest.mark.parametrize(("status", "error"), [(503, None), (None, Reason.TIMEOUT), (None, Reason.PROTOCOL)])
def test_a_server_that_failed_or_did_not_answer_holds_its_origin_for_robots_retry(
        status: int | None, error: str | None) -> None:
    # A server that is there but failing is left alone for robots_retry, as RFC 9309 asks.
    p = _policy(status, error)
    assert p.block_reason("http://h/a", "*") == Reason.ROBOTS_UNAVAILABLE
    assert p.expires == NOW + 300


def test_without_an_unreachable_ttl_a_refused_connection_holds_the_origin_for_robots_retry() -> None:
    p = policy_from_fetch(None, b"", Reason.CONNECT, ttl=86_400, retry_ttl=300, now=NOW)
    assert p.expires == NOW + 300
    assert p.block_reason("http://h/a", "*") == Reason.ROBOTS_UNAVAILABLE


def test_an_unreachable_ttl_never_lengthens_robots_retry() -> None:
    p = policy_from_fetch(None, b"", Reason.CONNECT, ttl=86_400, retry_ttl=1, unreachable_ttl=2, now=NOW)
    assert p.expires == NOW + 1


def test_an_answer_is_kept_for_ttl_and_obeyed() -> None:
    p = _policy(200, None, b"User-agent: *\nDisallow: /private\n")
    assert p.expires == NOW + 86_400
    assert p.block_reason("http://h/private/x", "*") == Reason.ROBOTS
    assert p.block_reason("http://h/public", "*") is None


def test_a_robots_txt_redirected_to_a_server_that_is_not_there_holds_the_origin_for_robots_retry() -> None:
    # The origin answered (a redirect): its pages would reach it, so they wait as for a 5xx
    # rather than fail as connect errors of a server that is up.
    p = policy_from_fetch(None, b"", Reason.CONNECT, ttl=86_400, retry_ttl=300, unreachable_ttl=2,
                          redirected=True, now=NOW)
    assert p.expires == NOW + 300
    assert p.block_reason("http://h/a", "*") == Reason.ROBOTS_UNAVAILABLE


def test_what_a_cached_entry_says_of_reachability_survives_redis_and_old_entries_keep_their_wait() -> None:
    p = _policy(None, Reason.CONNECT)
    assert RobotsPolicy.loads(p.dumps()).block_reason("http://h/a", "*") == Reason.CONNECT
    # Written by a worker from before: a connect failure held its origin robots_retry.
    old = '{"s": null, "b": "", "e": 1300.0, "r": "connect"}'
    assert RobotsPolicy.loads(old).block_reason("http://h/a", "*") == Reason.ROBOTS_UNAVAILABLE
