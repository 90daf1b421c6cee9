"""The pipeline runner alone: order, drops with their reasons, failures that cost one item, an
open_spider that fails and is tried again, close once."""

from __future__ import annotations

from typing import Any

import pytest

from crawler.spiders import DropItem, Spider
from crawler.spiders.pipelines import OpenPipelines, Pipelines, PipelineUnavailable, drop_reason

calls: list[str] = []


class Flaky:
    fail_open = 1

    def open_spider(self, spider: Spider) -> None:
        calls.append("open")
        if Flaky.fail_open:
            Flaky.fail_open -= 1
            raise OSError("database not up yet")

    def process_item(self, item: dict[str, Any], spider: Spider) -> Any:
        if item.get("drop"):
            raise DropItem(item["drop"])
        if item.get("garbage"):
            return 42
        return {**item, "seen": [*item.get("seen", []), "flaky"]}

    def close_spider(self, spider: Spider) -> None:
        calls.append("close")


class Last:
    async def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        return {**item, "seen": [*item["seen"], "last"]}


def test_order_drops_failures_and_a_retried_open() -> None:
    calls.clear()
    p = Pipelines(Spider(), [Flaky, Last])
    first = p.process({"a": 1}, "http://h/")
    assert first.item is None and first.counts["spider_error:open_spider"] == 1
    assert first.counts["items_dropped:pipeline_unavailable"] == 1
    assert p.process({"a": 1}, "http://h/").item == {"a": 1, "seen": ["flaky", "last"]}
    dropped = p.process({"drop": "Out of stock!"}, "http://h/")
    assert dropped.item is None and dropped.counts == {"items_dropped": 1, "items_dropped:out_of_stock": 1}
    bad = p.process({"garbage": True}, "http://h/")
    assert bad.item is None and bad.counts["spider_error:process_item"] == 1
    p.close()
    p.close()
    assert calls == ["open", "open", "close"]
    assert p.process({"a": 1}, "http://h/").item is None  # closed: nothing runs any more


def test_drop_reasons_are_counter_names() -> None:
    assert drop_reason(DropItem("")) == "dropped"
    assert drop_reason(DropItem("  Price: missing / zero ")) == "price_missing_zero"
    assert len(drop_reason(DropItem("x" * 100))) == 40


def test_each_job_has_its_own_set_and_the_oldest_is_closed_past_the_size() -> None:
    calls.clear()
    open_sets = OpenPipelines(size=1)

    class WithPipes(Spider):
        pipelines = [Flaky]

    Flaky.fail_open = 0
    a = open_sets.get("a", WithPipes(), [], [])
    assert a is not None and open_sets.get("a", WithPipes(), [], []) is a
    assert open_sets.get("none", Spider(), [], []) is None
    a.process({}, "u")
    assert open_sets.jobs() == ["a"]
    open_sets.get("b", WithPipes(), [], [])
    assert calls == ["open", "close"] and a.closed


class Unbuildable:
    built = 0

    def __init__(self) -> None:
        Unbuildable.built += 1
        raise KeyError("MONGO_URI")

    def process_item(self, item: dict[str, Any], spider: Spider) -> Any:
        return item


def test_a_pipeline_that_cannot_be_built_stops_its_job_once_not_per_item() -> None:
    p = Pipelines(Spider(), [Flaky, Unbuildable])
    with pytest.raises(PipelineUnavailable, match="Unbuildable: constructor raised KeyError") as first:
        p.process({"a": 1}, "http://h/")
    with pytest.raises(PipelineUnavailable) as again:
        p.process({"a": 2}, "http://h/")
    assert again.value is first.value and Unbuildable.built == 1  # built once, the reason kept
