"""Where spider code may come from: the API and ``crawler submit`` refuse a spider outside the
directories CRAWLER_SPIDER_PATHS lists without running a line of it; a worker refuses such a job
(one an older console accepted) the same way; a spider under a listed directory and an installed
entry point still run end to end, the entry point never imported by the console."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from crawler import jobs
from crawler.config.settings import Settings
from crawler.state import keys
from crawler.testweb import TestWeb
from crawler.web import create_app
from tests.conftest import Workers, wait_done
from tests.integration.test_crawl import cli, no_private_redis_env

JSON = {"Content-Type": "application/json"}
CANARY = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")  # at import: the proof that it ran

from crawler.spiders import Spider


class Cls(Spider):
    start_urls = ["http://127.0.1.1/"]

    def parse(self, page):
        yield {{"title": page.css("title::text").get()}}
"""


@dataclass
class Layout:
    listed: Path  # a directory CRAWLER_SPIDER_PATHS lists
    outside: Path  # one it does not
    canary: Path  # outside/canary.py, writing ``marker`` when imported
    marker: Path

    def ref(self, how: str) -> str:
        """The canary named by path, by module name beside the submitter, with ``..`` out of
        the listed directory, or through a symlink in it."""
        return {"path": f"{self.canary}:Cls", "module": "canary:Cls",
                "dotdot": f"{self.listed}/../outside/canary.py:Cls", "symlink": f"{self.listed / 'link.py'}:Cls"}[how]


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    listed, outside = tmp_path / "listed", tmp_path / "outside"
    listed.mkdir()
    outside.mkdir()
    marker = tmp_path / "canary-imported"
    canary = outside / "canary.py"
    canary.write_text(CANARY.format(marker=str(marker)))
    (listed / "link.py").symlink_to(canary)
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", os.pathsep.join([os.environ["CRAWLER_SPIDER_PATHS"], str(listed)]))
    return Layout(listed, outside, canary, marker)


@pytest.fixture
def client(r: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(r, event_interval=0.2), base_url="http://127.0.0.1") as c:
        yield c


def _post(client: TestClient, tmp_path: Path, seeds: list[str], **settings: object) -> tuple[int, dict[str, str]]:
    res = client.post("/api/jobs", headers=JSON,
                      json={"seeds": seeds, "settings": {"store": f"sqlite:///{tmp_path / 'c.db'}", **settings}})
    return res.status_code, res.json()


@pytest.mark.parametrize("how", ["path", "module", "dotdot", "symlink"])
def test_the_api_refuses_a_spider_outside_the_listed_directories_unrun(
        client: TestClient, layout: Layout, tmp_path: Path, r: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    monkeypatch.chdir(layout.outside)  # the console's working directory holds canary.py
    status, body = _post(client, tmp_path, ["http://127.0.1.1/"], spider=layout.ref(how))
    assert status == 400, body
    assert "is not under a directory CRAWLER_SPIDER_PATHS lists" in body["error"], body
    assert "\n" not in body["error"]
    assert not layout.marker.exists()
    assert not jobs.known(r)


def test_the_api_takes_spider_paths_from_the_operator_only(client: TestClient, layout: Layout,
                                                           tmp_path: Path) -> None:
    status, body = _post(client, tmp_path, ["http://127.0.1.1/"], spider=f"{layout.canary}:Cls",
                         spider_paths=[str(layout.outside)])
    assert status == 400 and "spider_paths: set by the operator" in body["error"], body
    assert not layout.marker.exists()


def test_crawler_submit_refuses_a_spider_outside_the_listed_directories_unrun(
        layout: Layout, tmp_path: Path, redis_url: str) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    for ref in (layout.ref("path"), layout.ref("module"), "canary.py:Cls"):
        # Run beside the canary: ``python -m`` puts the working directory on the path.
        res = subprocess.run([sys.executable, "-m", "crawler", "submit", "http://127.0.1.1/", "--spider", ref,
                              "--store", store], cwd=layout.outside, env=dict(os.environ), capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 2, (ref, res.stdout, res.stderr)
        assert "is not under a directory CRAWLER_SPIDER_PATHS lists" in res.stderr, (ref, res.stderr)
        assert "set CRAWLER_SPIDER_PATHS=DIR" in res.stderr
        assert not layout.marker.exists(), ref


def test_a_worker_refuses_a_job_whose_spider_is_outside_its_paths(
        layout: Layout, tmp_path: Path, make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis) -> None:
    web = make_web(1, 3)
    allowed = layout.listed / "fine.py"
    allowed.write_text(CANARY.format(marker=str(tmp_path / "fine-imported")))
    settings = Settings.from_env(store=f"sqlite:///{tmp_path / 'w.db'}", shards=1, spider=f"{allowed}:Cls")
    job = jobs.submit(r, settings, web.seeds())
    # As an older console would have accepted it: the job names the canary, by path.
    recorded = json.loads(r.hget(keys.meta(job), "settings") or "{}")
    r.hset(keys.meta(job), "settings", json.dumps({**recorded, "spider": f"{layout.canary}:Cls",
                                                  "spider_version": ""}))
    workers.start("w", "shard-0,shared")
    st = wait_done(r, job, timeout=30)
    assert st["status"] == jobs.STOPPED
    assert "is not under a directory CRAWLER_SPIDER_PATHS lists" in str(st["error"]), st["error"]
    assert st["counters"]["spider_unavailable"] >= 1  # type: ignore[index]
    assert not st["counters"].get("stored")  # type: ignore[attr-defined]
    assert not layout.marker.exists()


def test_a_listed_spider_and_an_installed_one_run_end_to_end(
        client: TestClient, layout: Layout, tmp_path: Path, make_web: Callable[..., TestWeb], workers: Workers,
        r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    web = make_web(1, 4)
    listed = layout.listed / "titles.py"
    listed.write_text(CANARY.format(marker=str(tmp_path / "listed-imported")))
    site = tmp_path / "site-packages"
    (site / "titlespiders").mkdir(parents=True)
    installed_marker = tmp_path / "installed-imported"
    (site / "titlespiders" / "__init__.py").write_text(
        CANARY.format(marker=str(installed_marker)).replace("http://127.0.1.1/", web.seeds()[0]))
    dist = site / "titlespiders-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: titlespiders\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[crawler.spiders]\ntitles = titlespiders:Cls\n")
    monkeypatch.syspath_prepend(str(site))  # installed for the console too, but never imported by it

    status, first = _post(client, tmp_path, web.seeds(), spider=f"{listed}:Cls")
    assert status == 201, first
    status, second = _post(client, tmp_path, [], spider="titles")  # its start_urls, read from its source
    assert status == 201, second
    assert not installed_marker.exists() and not (tmp_path / "listed-imported").exists()
    assert json.loads(r.hget(keys.meta(second["id"]), "settings") or "{}")["spider"] == "titlespiders:Cls"

    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    workers.start("w", "shard-0,shard-1,shard-2,shard-3,shared", env={"PYTHONPATH": pythonpath})
    for job in (first["id"], second["id"]):
        st = wait_done(r, job, timeout=30)
        assert st["status"] == jobs.DONE and not st.get("error"), st
        assert int(st["counters"]["items"]) >= 1, st  # type: ignore[index]
    assert installed_marker.exists()  # the worker ran it



def test_crawler_crawl_runs_the_operators_own_spider_file_anywhere(layout: Layout, tmp_path: Path,
                                                                   make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 3)
    env = {k: v for k, v in no_private_redis_env().items() if k != "CRAWLER_SPIDER_PATHS"}
    out = tmp_path / "out"
    res = cli("crawl", *web.seeds(), "--spider", f"{layout.canary}:Cls", "--out", str(out), "--workers", "1",
              env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "items: 3 in" in res.stdout, res.stdout  # its workers were given the file's directory
