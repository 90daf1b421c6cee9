"""Bad settings and seeds stop ``crawler crawl`` and ``crawler submit`` with one line and exit
status 2 before anything is created, started or written (no output directory, no redis-server,
no store file, no Redis key); ``jobs.submit`` refuses them before its first write."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import SettingError, Settings
from crawler.local.redis_server import find_redis_server
from tests.conftest import ROOT


@pytest.fixture
def watched_redis(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose redis-server leaves a mark when anything runs it (then runs the
    real one), so a test can tell that a crawl started none."""
    mark = tmp_path / "redis-server-ran"
    wrapper = tmp_path / "redis-server"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {mark}\nexec {find_redis_server().path} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k != "CRAWLER_REDIS_URL"}
    env["CRAWLER_REDIS_SERVER"] = str(wrapper)
    return env, mark


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert len(lines[0]) < 200
    return lines[0]


@pytest.mark.parametrize("args, extra_env, expected", [
    (["--delay", "nan"], {}, "crawler crawl: setting delay: must be a finite number >= 0, got 'nan'"),
    (["--user-agent", "a\r\nb"], {}, r"crawler crawl: setting user_agent: must be printable ASCII"),
    ([], {"CRAWLER_OBEY_ROBOTS": "treu"},
     "crawler: setting obey_robots: CRAWLER_OBEY_ROBOTS must be one of 1/0, true/false, yes/no, on/off, got 'treu'"),
    (["http://[v1.a:b c]/"], {}, "crawler crawl: seed 'http://[v1.a:b c]/': IPvFuture host"),
])
def test_crawl_with_a_bad_setting_or_seed_starts_nothing(
        tmp_path: Path, watched_redis: tuple[dict[str, str], Path], args: list[str], extra_env: dict[str, str],
        expected: str) -> None:
    env, mark = watched_redis
    out = tmp_path / "out"
    line = _one_line(_cli("crawl", "http://a.test/", *args, "--out", str(out), env={**env, **extra_env}))
    assert expected in line
    assert not out.exists() and not mark.exists()


@pytest.mark.parametrize("args, expected", [
    (["--delay", "inf"], "crawler submit: setting delay: must be a finite number >= 0, got 'inf'"),
    (["http://[v1.a:b c]/"], "crawler submit: seed 'http://[v1.a:b c]/': IPvFuture host"),
])
def test_submit_with_a_bad_setting_or_seed_writes_nothing(tmp_path: Path, redis_url: str, r: redis.Redis,
                                                          args: list[str], expected: str) -> None:
    db = tmp_path / "crawl.db"
    line = _one_line(_cli("submit", "http://a.test/", *args, "--store", f"sqlite:///{db}", "--redis-url", redis_url,
                          env=dict(os.environ)))
    assert expected in line
    assert r.dbsize() == 0 and not db.exists()


def test_jobs_submit_checks_settings_before_its_first_write(r: redis.Redis, tmp_path: Path) -> None:
    # A caller (a console, a script) may build settings without the command line's checks.
    bad = dataclasses.replace(Settings.from_env({}), delay=float("nan"), store=f"sqlite:///{tmp_path / 'c.db'}")
    with pytest.raises(SettingError, match="setting delay: must be a finite number >= 0, got nan"):
        jobs.submit(r, bad, ["http://a.test/"])
    assert r.dbsize() == 0 and not (tmp_path / "c.db").exists()
