"""Dead-shard takeover: who serves a domain while shards are down, and when a shard is judged
down or live again from the nodes' heartbeat records."""

from __future__ import annotations

from typing import Any

import pytest

from crawler.config.settings import Settings
from crawler.frontier.sharding import owner, ranked_shards, shard_of_domain, standby
from crawler.frontier.takeover import decide

DOMAINS = [f"site{i}.example{i % 7}.com" for i in range(5_000)]


@pytest.mark.parametrize("shards, down", [(2, {1}), (4, {2}), (5, {0, 3})])
def test_only_the_dead_shards_domains_move_each_to_its_best_live_backup(shards: int, down: set[int]) -> None:
    dead = frozenset(down)
    for d in DOMAINS:
        home, now = shard_of_domain(d, shards), owner(d, shards, dead)
        if home not in dead:
            assert now == home  # untouched
        else:
            assert now == next(s for s in ranked_shards(d, shards) if s not in dead)
            assert now not in dead
    # Back up: everything is home again.
    assert all(owner(d, shards, frozenset()) == shard_of_domain(d, shards) for d in DOMAINS)


def test_a_dead_shards_domains_spread_over_the_live_ones() -> None:
    moved = [owner(d, 4, frozenset({2})) for d in DOMAINS if shard_of_domain(d, 4) == 2]
    counts = {s: moved.count(s) for s in (0, 1, 3)}
    assert all(abs(n / len(moved) - 1 / 3) < 0.05 for n in counts.values()), counts


def test_every_shard_down_leaves_domains_where_they_are() -> None:
    assert all(owner(d, 3, frozenset({0, 1, 2})) == shard_of_domain(d, 3) for d in DOMAINS[:100])


def test_standby_queue_is_a_live_shard() -> None:
    assert standby(1, 2, frozenset({1})) == 0
    assert standby(1, 4, frozenset({1, 2})) == 3
    assert standby(0, 3, frozenset()) == 0
    assert standby(5, 3, frozenset({0})) == 2  # beyond the count: its place modulo the count
    assert standby(6, 3, frozenset({0})) == 1  # or the next live one after it
    assert [standby(p, 2) for p in range(6)] == [0, 1, 0, 1, 0, 1]  # parts spread over the shards left
    assert standby(1, 2, frozenset({0, 1})) == 1  # nowhere better


def _rec(node: str, shards: list[int], last: float, *, offline: bool = False) -> dict[str, Any]:
    return {"node": node, "shards": shards, "last": last, "interval": 2.0, "offline": offline}


NOW = 1000.0


def test_a_shard_goes_down_when_all_its_workers_missed_n_heartbeats() -> None:
    recs = [_rec("a", [0], NOW), _rec("b", [1], NOW - 9.9), _rec("c", [1], NOW - 20)]
    assert decide(recs, {}, 5, NOW) == {}  # b missed only 4 heartbeats
    recs[1] = _rec("b", [1], NOW - 10)
    assert decide(recs, {}, 5, NOW) == {1: NOW}


def test_a_warm_shutdown_counts_its_silence_from_when_it_went() -> None:
    assert decide([_rec("a", [0], NOW), _rec("b", [1], NOW - 3, offline=True)], {}, 5, NOW) == {}
    assert decide([_rec("a", [0], NOW), _rec("b", [1], NOW - 12, offline=True)], {}, 5, NOW) == {1: NOW}


def test_down_is_sticky_until_a_worker_of_the_shard_is_alive() -> None:
    was = {1: 500.0}
    # Its worker's record is gone (forgotten) or still silent: still down, since unchanged.
    assert decide([_rec("a", [0], NOW)], was, 5, NOW) == was
    assert decide([_rec("a", [0], NOW), _rec("b", [1], NOW - 6)], was, 5, NOW) == was
    # Back: alive means fewer than 2 heartbeats missed.
    assert decide([_rec("a", [0], NOW), _rec("b", [1], NOW - 1)], was, 5, NOW) == {}
    # A restarted worker under another name serving shard 1 brings it back too.
    assert decide([_rec("a", [0], NOW), _rec("b", [1], NOW - 60), _rec("b2", [1], NOW)], was, 5, NOW) == {}


def test_no_takeover_when_every_worker_serves_every_shard() -> None:
    # `crawler crawl`: each worker consumes all shards; one silent worker leaves them all alive.
    recs = [_rec("w0", [0, 1], NOW), _rec("w1", [0, 1], NOW - 100)]
    assert decide(recs, {}, 5, NOW) == {}


def test_no_takeover_with_nobody_alive_to_take_over() -> None:
    assert decide([_rec("a", [0], NOW - 100), _rec("b", [1], NOW - 100)], {}, 5, NOW) == {}


def test_a_shard_nobody_ever_heartbeated_for_is_not_taken_over() -> None:
    assert decide([_rec("a", [0], NOW)], {}, 5, NOW) == {}  # shards 1.. of a 4-shard job: unseen


def test_takeover_after_is_off_or_at_least_two_heartbeats() -> None:
    assert Settings.from_env(takeover_after=0).takeover_after == 0
    with pytest.raises(ValueError, match="takeover_after"):
        Settings.from_env(takeover_after=1)
