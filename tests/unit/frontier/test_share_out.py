"""The dispatcher's share of a job's free slots among a split frontier's parts (``share_out``)."""

from __future__ import annotations

import pytest

from crawler.frontier.dispatcher import share_out


@pytest.mark.parametrize(("free", "demand", "want"), [
    (4, {0: 4, 1: 1}, {0: 3, 1: 1}),  # largest remainders first: 3.2 and 0.8
    (3, {0: 1, 1: 1, 2: 1, 3: 1}, {0: 1, 1: 1, 2: 1}),  # ties go to the lowest shard
    (10, {0: 2, 1: 0, 2: 3}, {0: 4, 2: 6}),  # none to a part with nothing due
    (0, {0: 5}, {}),
    (-2, {0: 5}, {}),  # over the job's concurrency (it was lowered): nothing more
    (5, {0: 0}, {}),
])
def test_free_slots_go_where_hosts_are_due(free: int, demand: dict[int, int], want: dict[int, int]) -> None:
    got = share_out(free, demand)
    assert got == want
    assert sum(got.values()) == (max(free, 0) if any(v > 0 for v in demand.values()) else 0)
