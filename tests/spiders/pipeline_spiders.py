"""A spider with item pipelines, for tests/integration/test_pipelines.py: items go through
``Number`` (drops every third, fails on one), then ``RecordToDb`` (writes each item to an SQLite
file of the test's own, and records open/close), then the job's own ``Stamp``.

Spider arguments: ``db`` (the SQLite file), ``kill_at`` (a marker file: the first process to see
an item with ``i == 1`` creates it and SIGKILLs itself before recording the item)."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from crawler.spiders import DropItem, Page, Spider


class Number:
    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        if item["i"] == 2:
            raise DropItem("Third of the page!")
        if item["i"] == 3 and item["page"].endswith("/"):
            raise RuntimeError("a pipeline bug")
        return {**item, "numbered": True}


class RecordToDb:
    def open_spider(self, spider: Spider) -> None:
        self.conn = sqlite3.connect(spider.db, timeout=30)  # type: ignore[attr-defined]
        self.conn.execute("CREATE TABLE IF NOT EXISTS seen (page TEXT, i INTEGER, item TEXT)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS events (pid INTEGER, what TEXT)")
        self.conn.execute("INSERT INTO events VALUES (?, 'open')", (os.getpid(),))
        self.conn.commit()

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        marker = getattr(spider, "kill_at", "")
        if marker and item["i"] == 1:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-batch, after item 0
        self.conn.execute("INSERT INTO seen VALUES (?, ?, ?)", (item["page"], item["i"], repr(sorted(item))))
        self.conn.commit()
        return item

    def close_spider(self, spider: Spider) -> None:
        self.conn.execute("INSERT INTO events VALUES (?, 'close')", (os.getpid(),))
        self.conn.commit()
        self.conn.close()


class Stamp:
    async def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        return {**item, "stamped": True}


class PipeSpider(Spider):
    version = "pipes-1"
    pipelines = [Number, "pipeline_spiders:RecordToDb"]

    def parse(self, page: Page) -> Iterator[Any]:
        for i in range(4):
            yield {"page": page.url, "i": i}


class Slow:
    """Takes ``spider.sleep`` seconds an item (a remote database), and notes each call in the file
    ``spider.calls``."""

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        with open(spider.calls, "a") as f:  # type: ignore[attr-defined]
            f.write(f"{item['page']} {item['i']}\n")
        time.sleep(float(spider.sleep))  # type: ignore[attr-defined]
        return item


class SlowPipeSpider(Spider):
    version = "slow-pipes-1"
    follow_links = False
    pipelines = [Slow]

    def parse(self, page: Page) -> Iterator[Any]:
        for i in range(3):
            yield {"page": page.url, "i": i}
