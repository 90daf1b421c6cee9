"""Store outages lose nothing: a PostgreSQL restart mid-crawl, a pool that reconnects, a WARC
writer that meets a failing disk. Real PostgreSQL (a private server this file stops and starts),
real workers, a real loopback web."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.pg_server import PgServer
from crawler.store import PageRecord, StoreUnavailable, open_store
from tests.conftest import ROOT, Workers, fresh_database, wait_done

# Leases much shorter than the outage: pages held through it survive only by renewal. The
# visibility timeout caps the store's retry wait at a quarter of it (3 s).
SHORT = {"CRAWLER_LEASE_TIMEOUT": "3", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10"}
OUTAGE = 12.0  # seconds PostgreSQL stays down


@pytest.fixture
def pg() -> Iterator[PgServer]:
    """A PostgreSQL of this test's own, since the test stops it."""
    with PgServer() as server:
        yield server


def test_the_store_reconnects_after_a_restart_and_says_when_it_cannot(pg: PgServer) -> None:
    url = fresh_database(pg.admin_url)
    store = open_store(url)
    assert store.put([PageRecord(url="http://e.com/1", job_id="j", fetch_id="f")])
    pg.stop()
    with pytest.raises(StoreUnavailable, match=r"^postgresql: cannot connect: .*127\.0\.0\.1") as err:
        store.put([PageRecord(url="http://e.com/2", job_id="j", fetch_id="f")])
    assert "\n" not in str(err.value)
    with pytest.raises(StoreUnavailable):
        open_store(url)
    pg.start()
    # The pooled connection died with the server: the check replaces it, the write goes through.
    assert store.put([PageRecord(url="http://e.com/2", job_id="j", fetch_id="f")])
    assert sorted(p["url"] for p in store.pages("j")) == ["http://e.com/1", "http://e.com/2"]
    store.close()


_WARC_CHILD = """
import json, random, sys
from crawler.store import PageRecord, StoreUnavailable
from crawler.store.warc import WarcFiles
w = WarcFiles(sys.argv[1])
out = {"failed": [], "files": []}
for i in range(40):
    rec = PageRecord(url=f"http://e.com/{i}", job_id="j", fetch_id="f", status=200, fetched_at=1.0)
    try:
        body = random.Random(i).randbytes(10_000)  # incompressible: the file grows by each record
        w.write(rec, http_version="HTTP/1.1", request_headers=[], response_headers=[], body=body)
        w.flush()
    except StoreUnavailable as exc:
        out["failed"].append([i, str(exc)])
    if w.path not in out["files"]:
        out["files"].append(w.path)
w.close()
print(json.dumps(out))
"""


def _limit_file_size() -> None:
    # A real write failure: the kernel refuses to grow any file past 64 KB (EFBIG), as a full
    # disk would refuse (ENOSPC); SIGXFSZ ignored so the write fails instead of killing.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))


def test_a_warc_write_that_fails_closes_and_rotates_its_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _WARC_CHILD, str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, preexec_fn=_limit_file_size, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["failed"], "the size limit never bit"
    assert all("file closed, next write starts a new one" in msg for _, msg in out["failed"])
    assert len(out["files"]) == len(out["failed"]) + 1  # a new file after each failure
    written = []
    for path in sorted(tmp_path.glob("*.warc.gz")):
        with open(path, "rb") as fh:  # every file reads to its end: no torn record left behind
            written += [r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(fh)
                        if r.rec_type == "response"]
    failed = {f"http://e.com/{i}" for i, _ in out["failed"]}
    assert set(written) == {f"http://e.com/{i}" for i in range(40)} - failed
    assert len(written) == len(set(written))


def _counter(client: redis.Redis, job_id: str, name: str) -> int:
    return int(jobs.status(client, job_id)["counters"].get(name, 0))  # a split frontier's parts summed


def test_a_postgresql_restart_mid_crawl_loses_nothing_and_refetches_nothing(
        r: redis.Redis, pg: PgServer, make_web, workers: Workers, tmp_path: Path) -> None:
    web = make_web(3, 100)
    reachable = web.reachable_urls()
    assert len(reachable) >= 300
    store_url = fresh_database(pg.admin_url)
    concurrency = 32
    for name in ("w0", "w1"):
        workers.start(name, "shard-0,shard-1", env=SHORT)
    settings = Settings.from_env(shards=2, per_host=4, concurrency=concurrency, store=store_url,
                                 warc_dir=str(tmp_path / "warc"))
    job_id = jobs.submit(r, settings, web.seeds())
    deadline = time.monotonic() + 60
    while _counter(r, job_id, "stored") < 60:
        assert time.monotonic() < deadline, jobs.status(r, job_id)
        time.sleep(0.02)

    pg.stop()
    down = time.monotonic()
    seen_error: dict[str, object] | None = None
    most_held = 0
    while time.monotonic() - down < OUTAGE:
        st = jobs.status(r, job_id)
        c = st["counters"]
        seen_error = seen_error or st.get("store_error")
        most_held = max(most_held, c.get("held", 0))
        # Backpressure: fetching stops once the job's concurrency is held by pages waiting to be stored.
        assert c.get("inflight", 0) + c.get("held", 0) <= concurrency
        assert c["dispatched"] - c.get("stored", 0) <= concurrency + c.get("retried", 0), c
        time.sleep(0.2)
    stored_during = _counter(r, job_id, "stored")
    pg.start()
    up = time.monotonic()
    st = wait_done(r, job_id, timeout=60)
    print(f"\npostgres down {OUTAGE:.0f}s; done {time.monotonic() - up:.1f}s after it came back; "
          f"{most_held} pages held at most; {st['counters'].get('store_retries', 0)} store retries")

    assert seen_error is not None and "postgresql" in str(seen_error["error"]), "status never showed the outage"
    assert "store_error" not in jobs.status(r, job_id), "the store error outlived the outage"
    assert most_held > 0 and stored_during < len(reachable)
    c = st["counters"]
    assert c.get("lease_expired", 0) == 0, c
    assert c.get("held", 0) == 0 and c.get("inflight", 0) == 0
    rows = [p["url"] for p in open_store(store_url).pages(job_id)]
    assert len(rows) == len(set(rows)), "duplicate rows"
    assert set(rows) == reachable
    fetches = Counter((h.site, h.path) for h in web.hits() if h.path != "/robots.txt")
    assert max(fetches.values()) == 1, "pages were fetched again"
    archived: set[str] = set()
    for path in (tmp_path / "warc").glob("*.warc.gz"):
        with open(path, "rb") as fh:
            archived |= {rec.rec_headers.get_header("WARC-Target-URI") for rec in ArchiveIterator(fh)
                         if rec.rec_type == "response"}
    assert archived >= reachable
    with psycopg.connect(store_url) as conn:
        assert conn.execute("SELECT count(*) FROM pages WHERE job_id = %s", (job_id,)).fetchone() == (len(rows),)


def test_a_store_that_refuses_is_not_an_outage(postgres_admin: str) -> None:
    from crawler.store import StoreRefused, StoreUnavailable
    from crawler.store.pgpool import PgPool

    base = postgres_admin.rsplit("/", 1)[0]
    with pytest.raises(StoreRefused, match="does not exist"), PgPool(f"{base}/no_such_database_here").connection():
        pass
    with pytest.raises(StoreUnavailable, match="cannot connect"), \
            PgPool("postgresql://postgres@127.0.0.1:1/postgres").connection():
        pass
