"""A worker child SIGKILLed mid-task: the message comes back (acks_late with
task_reject_on_worker_lost), and one that kills its worker every time is dropped after the cap."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.state import keys
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _hanging(calls: list[float], hang_first: int) -> Callable[[BaseHTTPRequestHandler], None]:
    lock = threading.Lock()

    def handler(h: BaseHTTPRequestHandler) -> None:
        with lock:
            calls.append(time.time())
            n = len(calls)
        if n <= hang_first:
            time.sleep(20)  # the worker child is killed meanwhile
        body = b"<html><title>slow</title></html>"
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return handler


def _kill_child_when_called(worker_pid: int, calls: list[float], times: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    killed = 0
    while killed < times and time.monotonic() < deadline:
        if len(calls) > killed:
            for child in _children(worker_pid):
                os.kill(child, signal.SIGKILL)
            killed += 1
        time.sleep(0.05)
    assert killed == times, f"killed {killed} of {times}"


def test_killed_child_task_is_redelivered_and_stored_once(make_web: Callable[..., TestWeb], workers: Workers,
                                                         r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    calls: list[float] = []
    web.route(0, "/", _hanging(calls, hang_first=1))
    proc = workers.start("w", "shard-0,shard-1,shard-2,shard-3", pool="prefork")
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db"), web.seeds())
    _kill_child_when_called(proc.pid, calls, times=1)
    st = wait_done(r, job_id, timeout=60)
    assert st["counters"]["stored"] == 1
    assert len(calls) == 2  # the killed attempt and the redelivered one
    import sqlite3

    assert sqlite3.connect(tmp_path / "c.db").execute("SELECT count(*) FROM pages").fetchone()[0] == 1


def test_a_message_that_always_kills_its_worker_is_dropped_after_the_cap(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    calls: list[float] = []
    web.route(0, "/", _hanging(calls, hang_first=100))
    proc = workers.start("w", "shard-0,shard-1,shard-2,shard-3", pool="prefork",
                         env={"CRAWLER_MAX_REDELIVERIES": "2"})
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db"), web.seeds())
    _kill_child_when_called(proc.pid, calls, times=3)  # the first delivery and two redeliveries
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not jobs.status(r, job_id)["counters"].get("poison"):
        time.sleep(0.1)
    assert jobs.status(r, job_id)["counters"]["poison"] == 1
    time.sleep(1.0)
    assert len(calls) == 3  # the fourth delivery was dropped, not run
    assert [k for k in r.scan_iter(keys.delivery("*"))]
