"""``crawler nodes`` from Celery's own heartbeats, with real workers."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis

from crawler import cli, jobs
from crawler.config.settings import Settings
from crawler.state import nodes
from tests.conftest import Workers, wait_done


def _by_name(client: redis.Redis) -> dict[str, dict[str, object]]:
    return {n["node"].split("@")[0]: n for n in nodes.nodes(client)}


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_nodes_lists_workers_their_shards_work_and_state(r: redis.Redis, make_web, workers: Workers,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    web = make_web(2, 15)
    a = workers.start("a", "shard-0")
    b = workers.start("b", "shard-1")
    job_id = jobs.submit(r, Settings.from_env(shards=2, per_host=4, store=f"sqlite:///{tmp_path}/c.db"), web.seeds())
    wait_done(r, job_id)
    _wait(lambda: {"a", "b"} <= set(_by_name(r)))
    # The next heartbeat after the crawl carries every page fetched.
    fetched = jobs.status(r, job_id)["counters"]["fetched"]
    _wait(lambda: sum(int(n["fetched"]) for n in _by_name(r).values()) == fetched)
    got = _by_name(r)
    assert (got["a"]["pid"], got["a"]["shards"], got["a"]["state"]) == (a.pid, [0], "alive")
    assert (got["b"]["pid"], got["b"]["shards"], got["b"]["state"]) == (b.pid, [1], "alive")

    assert cli.main(["nodes", "--json"]) == 0
    assert {n["node"].split("@")[0] for n in json.loads(capsys.readouterr().out)} == {"a", "b"}

    a.send_signal(signal.SIGKILL)  # no goodbye: it falls silent
    b.send_signal(signal.SIGTERM)  # warm shutdown: it says it is going
    _wait(lambda: _by_name(r)["b"]["state"] == "gone")
    _wait(lambda: str(_by_name(r)["a"]["state"]).startswith("silent for"), timeout=15)
    assert cli.main(["nodes"]) == 0
    out = capsys.readouterr().out
    assert "silent for" in out and "gone" in out


def test_a_process_context_built_by_a_task_without_the_workers_name_takes_it_from_the_next(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat tick or a redelivery check builds the task context knowing no worker name; the
    worker's pages and fetch counts must still go under its name, not ``host:pid``."""
    from crawler.celeryapp import tasks

    monkeypatch.setattr(tasks, "_ctx", None)  # this process's own, put back after
    first = tasks.context()
    assert "@" not in first.node  # the process's own name, for want of another
    assert tasks.context("w1@vm") is first and first.node == "w1@vm"
    assert tasks.context().node == "w1@vm"  # a later nameless call keeps it
