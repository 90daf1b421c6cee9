"""`celery -A crawler flower` shows the crawl's tasks (workers send task events by default)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.redis_server import free_port
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, wait_done


def test_flower_lists_crawl_tasks(make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis,
                                  tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "CRAWLER_REDIS_URL": workers.redis_url, "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = subprocess.Popen([sys.executable, "-m", "celery", "-A", "crawler", "flower", "--address=127.0.0.1",
                               f"--port={port}", "--max_tasks=1000"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "flower.log", "wb"))  # noqa: SIM115
    try:
        web = make_web(1, 10)
        workers.start("w", "shard-0,shard-1,shard-2,shard-3")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if client.get("/healthcheck").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            wait_done(r, jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db"), web.seeds()))
            names: set[str] = set()
            while time.monotonic() < deadline and not {"crawler.fetch", "crawler.store"} <= names:
                tasks = client.get("/api/tasks").json()
                names = {t["name"] for t in tasks.values()}
                time.sleep(0.3)
        assert {"crawler.fetch", "crawler.parse", "crawler.dedup", "crawler.store"} <= names
        # Each page's chain, as Flower links it: the fetch is the root, parse its child, dedup
        # and store the parse's children, all under the fetch's root id.
        by_name: dict[str, list[dict[str, Any]]] = {}
        for t in tasks.values():
            by_name.setdefault(t["name"], []).append(t)
        for fetch in by_name["crawler.fetch"]:
            assert fetch["parent_id"] is None and fetch["root_id"] == fetch["uuid"]
        for parse in by_name["crawler.parse"]:
            parent = tasks[parse["parent_id"]]
            assert parent["name"] == "crawler.fetch" and parse["root_id"] == parent["uuid"]
        for child in by_name["crawler.dedup"] + by_name["crawler.store"]:
            parent = tasks[child["parent_id"]]
            assert parent["name"] == "crawler.parse" and child["root_id"] == parent["root_id"]
    finally:
        flower.terminate()
        flower.wait(10)
