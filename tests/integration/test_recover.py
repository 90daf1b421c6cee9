"""Redis is not the only copy: the store records each job's definition, and ``crawler recover``
rebuilds a job on an empty Redis from it (both store backends; the end-to-end tests with a
killed Redis are in test_chaos.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from crawler import jobs, stages
from crawler.cli import main
from crawler.config.settings import Settings
from crawler.control.rebuild import RecoverError, recover
from crawler.frontier import Entry
from crawler.stages.messages import FetchedPage, groups_from_json
from crawler.state import keys
from crawler.store import JobDefinition, PageRecord, open_store

A, B, C, D = (f"http://a.example/{p}" for p in ("", "b", "c", "d"))


def _queued(client: redis.Redis, job_id: str) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    # Under the job's tag, or a split frontier's parts' (``keys.frontier_part``).
    for key in (k for k in client.scan_iter(keys.job_pattern(job_id)) if k.split(b"}:", 1)[1].startswith(b"q:")):
        for raw in client.lrange(key, 0, -1):
            e = Entry.decode(raw)
            assert e.url not in out, f"{e.url} queued twice"
            out[e.url] = e
    return out


def test_job_definitions_are_recorded_once(store_url: str) -> None:
    store = open_store(store_url)
    first = JobDefinition("j1", [A], {"shards": 2, "allow_domains": ["a.example"]}, 100.0, every=60.0)
    store.save_job(first)
    store.save_job(JobDefinition("j1", [B], {"shards": 9}, 200.0))  # idempotent: the first one stays
    assert store.job("j1") == first
    assert store.job("nope") is None
    store.put([PageRecord(url=A, job_id="j1", fetch_id="f", nofollow=True)])
    assert [p["nofollow"] for p in store.pages("j1")] == [True]
    store.close()


def test_submit_records_the_definition_in_the_store(r: redis.Redis, store_url: str) -> None:
    settings = Settings.from_env(store=store_url, shards=3, max_depth=4, every=3600.0)
    job_id = jobs.submit(r, settings, ["HTTP://A.example/b#frag", A])
    store = open_store(store_url)
    got = store.job(job_id)
    store.close()
    assert got is not None
    assert got.seeds == [B, A]  # canonical, as Redis has them
    assert got.settings == json_settings(r, job_id)
    assert (got.every, got.cron) == (3600.0, "")


def json_settings(client: redis.Redis, job_id: str) -> dict[str, object]:
    import json

    return dict(json.loads(client.hget(keys.meta(job_id), "settings")))


def _lose_redis(client: redis.Redis, job_id: str) -> None:
    """What a Redis restarted without persistence holds of the job: nothing."""
    client.flushdb()
    jobs.forget(job_id)


def test_recover_marks_stored_pages_seen_and_queues_their_unstored_outlinks(r: redis.Redis, store_url: str) -> None:
    settings = Settings.from_env(store=store_url, shards=2, obey_robots=False)
    job_id = jobs.submit(r, settings, [A])
    store = open_store(store_url)
    store.put([
        PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, depth=0,
                   outlinks=[B, C, "http://elsewhere.example/x"]),
        PageRecord(url=B, job_id=job_id, fetch_id="f", status=200, depth=1, outlinks=[A, C, D]),
        # A page that said nofollow: its links were never followed, and still are not.
        PageRecord(url=C, job_id=job_id, fetch_id="f", status=200, depth=1, nofollow=True,
                   outlinks=["http://a.example/hidden"]),
        PageRecord(url="http://a.example/gone", job_id=job_id, fetch_id="f", status=404, depth=2, error="http_4xx"),
        PageRecord(url=A, job_id="another-job", fetch_id="f", status=200, outlinks=["http://a.example/other"]),
    ])
    _lose_redis(r, job_id)

    done = recover(r, store, job_id)

    assert (done.stored, done.seen, done.queued, done.status) == (4, 4, 1, jobs.RUNNING)
    queued = _queued(r, job_id)
    assert set(queued) == {D}
    assert (queued[D].depth, queued[D].referrer) == (2, B)
    st = jobs.status(r, job_id)
    c = st["counters"]
    assert (c["stored"], c["error:http_4xx"], c["open"], c["recovered"]) == (4, 1, 1, 1)
    assert job_id in jobs.active(r)
    # Stored pages are seen: found again, they are not queued again; a new URL still is.
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    assert stages.dedup_stage(ctx, job, "",
                              groups_from_json([[A, 1, D], [B, 1, D], ["http://a.example/new", 3, D]])) == [
        "http://a.example/new"]
    # A second recover finds the job in Redis and refuses to queue its work twice.
    with pytest.raises(RecoverError, match="in Redis already"):
        recover(r, store, job_id)
    with pytest.raises(KeyError, match="no job"):
        recover(r, store, "never-submitted")
    store.close()


def test_recover_respects_max_depth_and_reseeds_a_seed_never_stored(r: redis.Redis, store_url: str) -> None:
    # max_depth: the exact seen-set, which keeps shortest depths.
    settings = Settings.from_env(store=store_url, shards=1, max_depth=1, obey_robots=False)
    job_id = jobs.submit(r, settings, [A, "http://b.example/"])
    store = open_store(store_url)
    store.put([
        PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, depth=0, outlinks=[B]),
        PageRecord(url=B, job_id=job_id, fetch_id="f", status=200, depth=1, outlinks=[C]),  # at the limit
    ])
    _lose_redis(r, job_id)
    done = recover(r, store, job_id, shards=3)  # ``crawler shards set 3`` ran after submission
    store.close()
    assert jobs.load(r, job_id).settings.shards == 3
    queued = _queued(r, job_id)
    assert set(queued) == {"http://b.example/"} and queued["http://b.example/"].depth == 0
    assert done.queued == 1
    assert r.hget(keys.seen(job_id), B) == b"x1"


def test_recover_of_a_job_with_nothing_left_is_done(r: redis.Redis, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False), [A])
    store = open_store(store_url)
    store.put([PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, outlinks=[])])
    store.close()
    _lose_redis(r, job_id)
    assert main(["recover", job_id, "--store", store_url]) == 0
    assert jobs.status(r, job_id)["status"] == jobs.DONE


def test_recover_resumes_the_cycle_a_periodic_job_was_in(r: redis.Redis, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, every=600.0, obey_robots=False), [A])
    now = time.time()
    store = open_store(store_url)
    store.put([
        # Cycle 2 revisited the seed and found a new page C, not yet stored.
        PageRecord(url=A, job_id=job_id, fetch_id="f2", status=200, cycle=2, fetched_at=now - 5,
                   next_visit=now + 600, outlinks=[B, C]),
        # From cycle 1: B is due again, D is not.
        PageRecord(url=B, job_id=job_id, fetch_id="f1", status=200, depth=1, cycle=1, next_visit=now - 1),
        PageRecord(url=D, job_id=job_id, fetch_id="f1", status=200, depth=1, cycle=1, next_visit=now + 900),
    ])
    _lose_redis(r, job_id)
    done = recover(r, store, job_id, now=now)
    store.close()
    assert (done.cycle, done.seen, done.not_due, done.queued) == (2, 1, 1, 2)
    assert set(_queued(r, job_id)) == {B, C}
    assert jobs.cycle_of(r, job_id) == (2, pytest.approx(now - 5))
    assert r.sismember(keys.PERIODIC, job_id)
    # Cycle 1's record went with the lost Redis: not shown as a cycle of 1970 still running.
    [row] = jobs.cycles(r, job_id)
    assert (row["cycle"], row["started_at"], row["finished_at"]) == (2, pytest.approx(now - 5), None)
    # D is seen this cycle (not due); the seed A was stored this cycle.
    ctx = stages.Context.default(r)
    assert stages.dedup_stage(ctx, jobs.load(r, job_id), "", groups_from_json([[D, 1, A], [A, 0, ""]])) == []


def test_dedup_of_a_job_redis_lost_writes_nothing(r: redis.Redis, tmp_path: Path) -> None:
    """A worker still holding a lost job's settings must not mark URLs seen in a fresh Redis:
    the rebuild would then take them for queued and never fetch them."""
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False), [A])
    job = jobs.load(r, job_id)
    r.flushdb()
    with pytest.raises(KeyError):
        stages.dedup_stage(stages.Context.default(r), job, "", groups_from_json([[B, 1, A]]))
    assert r.dbsize() == 0


def test_recover_names_a_missing_job_in_one_line(r: redis.Redis, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    assert main(["recover", "nope", "--store", store_url]) == 2
    assert capsys.readouterr().err.strip() == (f"crawler recover: store {store_url}: no such file "
                                               f"'{tmp_path / 'c.db'}' (nothing was created)")
    assert not (tmp_path / "c.db").exists()
    open_store(store_url).close()
    assert main(["recover", "nope", "--store", store_url]) == 2
    assert capsys.readouterr().err.strip() == "crawler recover: no job nope is recorded in the store"


def test_a_workers_local_cache_forgets_a_rebuilt_job(r: redis.Redis, tmp_path: Path) -> None:
    """X was admitted (and cached as seen by this process) from R, then Redis was lost with X
    still queued. The rebuild queues R again; when R's links come back through the same
    process, X must be admitted again, not answered "seen" from memory."""
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    ctx = stages.Context.default(r)
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False), [A])
    x, ref = "http://a.example/x", "http://a.example/r"
    assert stages.dedup_stage(ctx, jobs.load(r, job_id), "", groups_from_json([[x, 2, ref]])) == [x]
    store = open_store(store_url)
    store.put([PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, outlinks=[ref])])
    _lose_redis(r, job_id)
    recover(r, store, job_id)
    store.close()
    assert set(_queued(r, job_id)) == {ref}
    assert stages.dedup_stage(ctx, jobs.load(r, job_id), "", groups_from_json([[x, 2, ref]])) == [x]


def test_a_page_whose_body_redis_lost_is_not_stored_unparsed(r: redis.Redis, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False), [A])
    ctx = stages.Context.default(r)
    r.set("body-kept", b"<html><a href='/b'>b</a></html>")
    pages = [FetchedPage(url=u, final_url=u, depth=0, status=200, content_type="text/html", body_key=k)
             for u, k in ((A, "body-kept"), (C, "body-gone"))]
    kept, _ = stages.parse_stage(ctx, jobs.load(r, job_id), "t", pages)
    assert [p.url for p in kept] == [A] and kept[0].outlinks == (B,)
    assert jobs.status(r, job_id)["counters"]["body_lost"] == 1


def test_a_link_batch_that_is_not_pending_leaves_the_bloom_filter_alone(r: redis.Redis, tmp_path: Path) -> None:
    """A dedup message from before a Redis loss, run after ``recover``, names a token the new
    Redis never registered: admission ignores it, and so must the Bloom filter, or its URLs
    would be seen and never queued."""
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db")
    assert settings.uses_bloom
    job_id = jobs.submit(r, settings, [A])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    assert stages.dedup_stage(ctx, job, "gone-before-the-loss:0", groups_from_json([[B, 1, A]])) == []
    assert stages.dedup_stage(ctx, job, "", groups_from_json([[B, 1, A]])) == [B]  # still new: queued now
    ctx.close()


@pytest.mark.parametrize("dedup", ["set", "bloom"])
def test_recover_keeps_a_redirect_target_its_redirecting_pages(r: redis.Redis, tmp_path: Path, dedup: str) -> None:
    # A's fetch ended at T (parse claimed it). After a rebuild, a link to T must not fetch and
    # parse T again: its content is A's row's, and a spider would yield its items twice.
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False, dedup=dedup), [A])
    target = "http://a.example/moved-here"
    store = open_store(store_url)
    store.put([PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, final_url=target, outlinks=[target])])
    _lose_redis(r, job_id)
    recover(r, store, job_id)
    ctx = stages.Context.default(r)
    assert stages.dedup_stage(ctx, jobs.load(r, job_id), "", groups_from_json([[target, 1, A]])) == []


def test_recover_fetches_a_redirect_target_whose_redirecting_page_lost_its_claim(
        r: redis.Redis, tmp_path: Path) -> None:
    # A was stored as T's duplicate: T was queued (or linked) first, and Redis was lost before T
    # was fetched. T is not A's: the rebuild must queue it from the link to it.
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, obey_robots=False), [A])
    target = "http://a.example/moved-here"
    store = open_store(store_url)
    store.put([PageRecord(url=A, job_id=job_id, fetch_id="f", status=200, outlinks=[B]),
               PageRecord(url=B, job_id=job_id, fetch_id="f", status=200, final_url=target,
                          near_duplicate_of=target, depth=1),
               PageRecord(url="http://a.example/c", job_id=job_id, fetch_id="f", status=200, outlinks=[target],
                          depth=1)])
    _lose_redis(r, job_id)
    done = recover(r, store, job_id)
    assert done.queued == 1, done
    assert jobs.status(r, job_id)["status"] == jobs.RUNNING
