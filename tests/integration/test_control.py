"""Steering a running job: settings changed while it runs reach every worker within 5 s and
change the request rate the test web sees; a per-host override; the central log; hosts table;
metrics. Real workers, real Redis, loopback HTTP."""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawler import cli as command
from crawler import control, jobs
from crawler.config.settings import SettingError, Settings
from crawler.errors import ConfigError, JobNotFound
from crawler.frontier import Entry, Frontier, HostOverride
from crawler.state import joblog, nodes
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.integration.test_crawl import cli

ALL = "shard-0,shard-1"


def _starts(web: TestWeb, site: int, after: float, before: float = float("inf")) -> list[float]:
    return sorted(h.start for h in web.hits() if h.site == site and after <= h.start < before
                  and h.path != "/robots.txt")


def _wait_hits(web: TestWeb, site: int, n: int, after: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(_starts(web, site, after)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} requests to site {site}"
        time.sleep(0.05)


def _median_gap(starts: list[float]) -> float:
    return statistics.median(b - a for a, b in itertools.pairwise(starts))


def test_delay_and_host_override_change_a_running_crawl(make_web: Callable[..., TestWeb], workers: Workers,
                                                        r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 400)
    workers.start("w0", ALL)
    workers.start("w1", ALL)
    settings = Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}", shards=2, delay=0.8, max_pages=400)
    job = jobs.submit(r, settings, web.seeds())
    t0 = time.time()
    _wait_hits(web, 0, 4, t0)
    slow = _median_gap(_starts(web, 0, t0))
    assert slow >= 0.75, slow

    # Faster for the whole job: within 5 s every worker dispatches at the new delay.
    t1 = time.time()
    changed = control.set_settings(r, job, {"delay": "0.1"}, by="tester")["changed"]
    assert changed == {"delay": [0.8, 0.1]}
    _wait_hits(web, 0, 20, t1 + 5)
    fast = _median_gap(_starts(web, 0, t1 + 5))
    assert fast < 0.3, (slow, fast)

    # One host slower again, the other left fast.
    host1 = web.origin(1)[len("http://"):]
    t2 = time.time()
    control.set_host_override(r, job, host1, delay="1.0", by="tester")
    _wait_hits(web, 1, 5, t2 + 5)
    _wait_hits(web, 0, 10, t2 + 5)
    assert _median_gap(_starts(web, 1, t2 + 5)) >= 0.95
    assert _median_gap(_starts(web, 0, t2 + 5)) < 0.3
    page = control.hosts(r, job, sort="host", desc=False)
    row = next(h for h in page["hosts"] if h["host"] == host1)
    assert row["override"] == {"delay": 1.0} and row["delay"] >= 1.0 and row["fetched"] > 0

    assert control.pause(r, job, by="tester") == jobs.PAUSED
    assert control.resume(r, job, by="tester") == jobs.RUNNING
    control.stop(r, job, by="tester")
    wait_done(r, job)

    events = [(e["event"], e["by"]) for e in control.logs(r, job, limit=100)]
    for event in ("submitted", "settings_changed", "host_override", "paused", "resumed", "stopped"):
        assert any(ev == event for ev, _ in events), (event, events)
    assert ("settings_changed", "tester") in events
    changed_line = next(e for e in control.logs(r, job) if e["event"] == "settings_changed")
    assert "delay 0.8 -> 0.1" in changed_line["message"]
    printed = cli("logs", job, "--redis-url", r.connection_pool.connection_kwargs and _url(r))
    assert printed.returncode == 0, printed.stderr
    assert "settings_changed" in printed.stdout and "by tester" in printed.stdout


def _url(r: redis.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    auth = f":{kw['password']}@" if kw.get("password") else ""
    return f"redis://{auth}{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def test_only_runtime_settings_change_and_are_checked_as_at_submission(r: redis.Redis, tmp_path: Path) -> None:
    job = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}"), ["http://127.0.1.1/"])
    with pytest.raises(SettingError, match="setting store cannot change while a job runs"):
        control.set_settings(r, job, {"store": "sqlite:///x.db"})
    with pytest.raises(SettingError, match="no setting named 'dely'"):
        control.set_settings(r, job, {"dely": "1"})
    with pytest.raises(SettingError, match="setting delay: the value must be a number, got 'fast'"):
        control.set_settings(r, job, {"delay": "fast"})
    with pytest.raises(SettingError, match="setting per_host: must be an integer >= 1, got '0'"):
        control.set_settings(r, job, {"per_host": "0"})
    with pytest.raises(SettingError, match="its seen-set is a Bloom filter"):
        control.set_settings(r, job, {"max_depth": "3"})
    with pytest.raises(JobNotFound):
        control.set_settings(r, "nope", {"delay": "1"})
    assert control.set_settings(r, job, {"user_agent": "Steered/1.0", "max_pages": 10})["changed"] == {
        "user_agent": ["crawler/0.1 (+https://example.invalid/bot)", "Steered/1.0"], "max_pages": [0, 10]}
    s = jobs.load(r, job, max_age=0).settings
    assert (s.user_agent, s.max_pages, s.dedup) == ("Steered/1.0", 10, "bloom")  # the seen-set's kind pinned
    with pytest.raises(ConfigError, match="not a host name"):
        control.set_host_override(r, job, "bad host!", delay=1)
    with pytest.raises(SettingError, match="setting delay: must be a finite number"):
        control.set_host_override(r, job, "127.0.1.1", delay="nan")
    res = cli("set", job, "store=x", "--redis-url", _url(r))
    assert res.returncode == 2 and "setting store cannot change while a job runs" in res.stderr
    res = cli("set", job, "delay=0.5", "--redis-url", _url(r))
    assert res.returncode == 0 and "delay 0.0 -> 0.5" in res.stdout
    # An empty --host (an unset $HOST) is a mistake, not the whole job's delay.
    res = cli("set", job, "--host", "", "delay=1", "--redis-url", _url(r))
    assert res.returncode == 2 and "not a host name" in res.stderr, res.stderr
    assert jobs.load(r, job, max_age=0).settings.delay == 0.5
    # A host the job has no URL of is said so, with the names it may have meant (its port).
    Frontier(r).admit(job, [Entry("http://127.0.1.9:8802/a")], shards=1, host_budget=100)
    assert "warning" not in control.set_host_override(r, job, "127.0.1.9:8802", delay=1)
    got = control.set_host_override(r, job, "127.0.1.9", delay=1)
    assert got["warning"] == (f"job {job} has no URL of host 127.0.1.9 yet: the override waits for one "
                              "(did you mean 127.0.1.9:8802?)")
    res = cli("set", job, "--host", "nosuch.example", "delay=2", "--redis-url", _url(r))
    assert res.returncode == 0 and res.stderr.strip() == (
        f"crawler set: warning: job {job} has no URL of host nosuch.example yet: the override waits for one")


def test_a_per_host_limit_overrides_the_jobs(r: redis.Redis) -> None:
    f = Frontier(r)
    job = f"ovr-{uuid.uuid4().hex[:8]}"
    r.hset(f"c:{{{job}}}:meta", mapping={"status": "running"})
    f.admit(job, [Entry(f"http://h1/{i}") for i in range(10)], shards=1)
    first = f.dispatch(job, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10)
    assert len(first.items) == 1
    f.set_host_override(job, "h1", HostOverride(per_host=3), shards=1)
    more = f.dispatch(job, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10)
    assert len(more.items) == 2  # up to 3 in flight now
    assert f.clear_host_override(job, "h1", shards=1)
    assert f.host_overrides(job, ["h1"]) == [None]


def test_hosts_are_paged_and_sorted_on_the_server(r: redis.Redis) -> None:
    job = jobs.submit(r, Settings.from_env(store=""), ["http://127.0.1.1/"])
    f = Frontier(r)
    f.admit(job, [Entry(f"http://10.0.{i // 200}.{i % 200}/x") for i in range(1200)], shards=1,
            host_budget=10)
    page = control.hosts(r, job, sort="host", desc=False, offset=100, limit=50)
    assert page["total"] >= 1200 and len(page["hosts"]) == 50
    names = [h["host"] for h in page["hosts"]]
    assert names == sorted(names)
    with pytest.raises(ConfigError, match="cannot sort hosts by 'color'"):
        control.hosts(r, job, sort="color")


def test_cycles_of_a_one_off_job_says_it_runs_once(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    job = jobs.submit(r, Settings.from_env(store=""), ["http://127.0.1.1/"])
    assert command.main(["cycles", job]) == 0
    assert capsys.readouterr().out == (f"job {job} runs once: it has no cycles (a job submitted with --every or "
                                       "--cron runs in cycles)\n")
    assert command.main(["cycles", job, "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"


def test_metrics_are_prometheus_text_and_logs_carry_worker_errors(r: redis.Redis, tmp_path: Path) -> None:
    job = jobs.submit(r, Settings.from_env(store=""), ["http://127.0.1.1/"])
    jobs.count(r, job, stored=3, **{"error:timeout": 2})
    handler = joblog.JobLogHandler(lambda: r)
    import logging

    logger = logging.getLogger("crawler.test_control")
    logger.addHandler(handler)
    try:
        token = joblog.current_job.set(job)
        try:
            raise ValueError("secret://u:hunter2@h broke")
        except ValueError:
            logger.exception("spider X: parse raised on http://127.0.1.1/a")
        finally:
            joblog.current_job.reset(token)
        logger.error("no job: not in any job's log")
    finally:
        logger.removeHandler(handler)
    (entry,) = [e for e in control.logs(r, job, level="ERROR")]
    assert entry["event"] == "log" and "parse raised" in entry["message"]
    assert "ValueError" in entry["message"] and "hunter2" not in entry["message"]
    nodes.record_heartbeat(r, "w0@h", shards=[0], interval=2.0)
    families = {f.name: f for f in text_string_to_metric_families(control.metrics(r))}
    assert {f.type for f in families.values()} <= {"counter", "gauge"}  # never "unknown": each family whole
    assert [s.name for s in families["crawler_node_up"].samples] == ["crawler_node_up"]
    pages = {s.labels["job"]: s.value for s in families["crawler_job_pages"].samples}
    assert pages[job] == 3
    errors = [s for s in families["crawler_job_errors"].samples if s.labels["job"] == job]
    assert [(s.labels["reason"], s.value) for s in errors] == [("timeout", 2)]
    assert any(row["id"] == job for row in control.list_jobs(r))


def test_submit_warns_of_a_relative_store_and_of_shards_no_worker_serves(
        r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # No worker heard from at all (a first submit before any worker started): one line, which
    # `status --wait` says too (before, both said nothing and waited).
    first, warnings = control.submit(r, {"store": f"sqlite:///{tmp_path / 'e.db'}", "shards": 2},
                                     ["http://127.0.1.1/"])
    assert warnings == ["no worker has sent a heartbeat yet: the job waits for one (start `celery -A crawler "
                        "worker -Q shard-0,shard-1`; workers send heartbeats while task events are on)"]
    res = cli("status", first, "--wait", "--timeout", "1", "--redis-url", _url(r))
    assert res.returncode == 2 and res.stderr.count("no worker has sent a heartbeat yet") == 1, res.stderr
    jobs.stop(r, first)
    # A worker serving shards 0 and 1 has been heard from; the job gets 4.
    nodes.record_heartbeat(r, "w1@probe", shards=[0, 1], interval=2.0)
    job, warnings = control.submit(r, {"store": "sqlite:///data/c.db", "shards": 4}, ["http://127.0.1.1/"])
    assert any("'data/c.db' is relative" in w and str(tmp_path / "data" / "c.db") in w for w in warnings), warnings
    unserved = [w for w in warnings if "no worker of it has ever sent a heartbeat" in w]
    assert [w.split(":")[0] for w in unserved] == ["shard 2", "shard 3"], warnings
    # An absolute store on shards every worker serves: nothing to say.
    _, warnings = control.submit(r, {"store": f"sqlite:///{tmp_path / 'd.db'}", "shards": 2},
                                 ["http://127.0.1.1/"])
    assert warnings == [], warnings
    # `status --wait` on the first job says once why it may wait, then gives up at its timeout.
    res = cli("status", job, "--wait", "--timeout", "1", "--redis-url", _url(r))
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("shard 2: no worker of it") == 1 and "shard 3: no worker" in res.stderr, res.stderr


def test_a_rendering_job_with_no_render_worker_says_so_at_submit_and_in_status(r: redis.Redis, tmp_path: Path) -> None:
    nodes.record_heartbeat(r, "w1@probe", shards=[0, 1], interval=2.0)
    values = {"store": f"sqlite:///{tmp_path / 'r.db'}", "shards": 2, "render": "auto"}
    job, warnings = control.submit(r, values, ["http://127.0.1.1/"])
    assert [w for w in warnings if "no live worker consumes the render queue" in w], warnings
    res = cli("status", job, "--redis-url", _url(r))
    assert "render=auto: no live worker consumes the render queue" in res.stdout, res.stdout
    # A worker of the render queue heard from: nothing to say.
    nodes.record_heartbeat(r, "w2@probe", shards=[], interval=2.0, render=True)
    assert control.render_lines(r, "auto") == []
    res = cli("status", job, "--redis-url", _url(r))
    assert "render queue" not in res.stdout, res.stdout
    assert control.render_lines(r, "never") == []
