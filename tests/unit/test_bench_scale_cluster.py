"""bench.scale --cluster: what a node's INFO says, read as the crawl's cost per page and per node."""

from __future__ import annotations

from typing import Any

import pytest

from bench.scale import node_costs, node_stats, per_page


class FakePipeline:
    """Answers INFO memory, INFO cpu, INFO commandstats and DBSIZE as redis-py parses them."""

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies
        self.asked: list[Any] = []

    def info(self, section: str) -> None:
        self.asked.append(self.replies[section])

    def dbsize(self) -> None:
        self.asked.append(self.replies["dbsize"])

    def execute(self) -> list[Any]:
        return self.asked


class FakeNode:
    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        return FakePipeline(self.replies)


def test_a_nodes_commands_leave_out_what_the_sampler_sends() -> None:
    node = FakeNode({
        "memory": {"used_memory": 2048},
        "cpu": {"used_cpu_sys": 1.5, "used_cpu_user": 2.25, "used_cpu_sys_children": 9},
        "commandstats": {"cmdstat_evalsha": {"calls": 700}, "cmdstat_hget": {"calls": 300},
                         "cmdstat_scan": {"calls": 5}, "cmdstat_info": {"calls": 40},
                         "cmdstat_dbsize": {"calls": 10}, "cmdstat_memory|usage": {"calls": 900}},
        "dbsize": 12,
    })
    assert node_stats(node) == {"used": 2048, "cpu_s": 3.75, "keys": 12, "calls": 1005}  # type: ignore[arg-type]


def test_cost_per_page_and_each_masters_share() -> None:
    first = {"a": {"used": 0, "cpu_s": 1.0, "keys": 0, "calls": 100},
             "b": {"used": 0, "cpu_s": 2.0, "keys": 0, "calls": 50}}
    last = {"a": {"used": 3 * 2**20, "cpu_s": 4.0, "keys": 300, "calls": 6100},
            "b": {"used": 2**20, "cpu_s": 3.0, "keys": 100, "calls": 2050},
            "c": {"used": 2**20, "cpu_s": 9.0, "keys": 9, "calls": 9}}  # no first sample: left out
    costs = node_costs(first, last, pages=1000)
    assert set(costs) == {"a", "b"}
    a, b = costs["a"], costs["b"]
    assert a["cpu_ms_per_page"] == pytest.approx(3.0) and b["cpu_ms_per_page"] == pytest.approx(1.0)
    assert a["commands_per_page"] == 6.0 and b["commands_per_page"] == 2.0
    assert a["command_share"] == 0.75 and b["key_share"] == 0.25 and a["cpu_share"] == pytest.approx(0.75)
    assert a["used_mb"] == 3.0 and a["keys"] == 300


def test_no_pages_crawled_is_no_division_by_zero() -> None:
    still = {"used": 1, "cpu_s": 0.5, "keys": 0, "calls": 7}
    assert per_page(still, still, 0)["commands_per_page"] == 0.0
    assert node_costs({"a": still}, {"a": still}, 0)["a"]["key_share"] == 0.0
