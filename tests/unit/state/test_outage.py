"""Polls that wait out Redis gone away (a master's failover) for a while, and no longer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from crawler.state.conn import through_outage


def _failing(times: int, exc: Exception) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return "ok"

    return calls, call


def test_an_outage_is_waited_out_and_said_once() -> None:
    said: list[str] = []
    calls, call = _failing(2, redis.ConnectionError("Connection refused"))
    assert through_outage(call, 5.0, said.append) == "ok"
    assert len(calls) == 3 and len(said) == 1 and "Connection refused" in said[0] and "5s" in said[0]


@pytest.mark.parametrize("exc", [redis.exceptions.ClusterDownError("CLUSTERDOWN"), redis.TimeoutError("slow"),
                                 redis.exceptions.TryAgainError("TRYAGAIN")])
def test_a_cluster_between_masters_is_an_outage(exc: Exception) -> None:
    calls, call = _failing(1, exc)
    assert through_outage(call, 5.0, lambda line: None) == "ok" and len(calls) == 2


def test_without_a_grace_or_past_it_the_error_is_the_callers() -> None:
    said: list[str] = []
    calls, call = _failing(10, redis.ConnectionError("down"))
    with pytest.raises(redis.ConnectionError):
        through_outage(call, 0, said.append)
    assert len(calls) == 1 and not said
    calls, call = _failing(100, redis.ConnectionError("down"))
    with pytest.raises(redis.ConnectionError):
        through_outage(call, 0.2, said.append)
    assert 1 < len(calls) < 5


def test_what_is_not_an_outage_is_not_waited_on() -> None:
    calls, call = _failing(1, redis.ResponseError("WRONGTYPE"))
    with pytest.raises(redis.ResponseError):
        through_outage(call, 5.0, lambda line: None)
    assert len(calls) == 1
