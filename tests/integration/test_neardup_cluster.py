"""The near-duplicate index on a Redis Cluster: each band under a hash tag of its own, so one job's
index spreads over the masters, and a batch still answers as its pages taken one by one would.
Batches stored at the same moment may keep two near-duplicates, never drop both: a page is only
ever marked a duplicate of a page kept as an original."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler.dedup.neardup import NearDuplicates
from crawler.local.redis_cluster import RedisCluster
from crawler.state import keys
from crawler.state.conn import connect
from tests.integration.test_neardup import _reference as unbounded_reference
from tests.integration.test_neardup_budget import _held, _variant
from tests.integration.test_neardup_budget import _reference as bounded_reference


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(masters=3, replicas=0, root=Path(tmp_path_factory.mktemp("ndcluster"))) as c:
        yield c


def _pages(seed: int, n: int) -> list[tuple[str, int]]:
    rnd = random.Random(seed)
    pages: list[tuple[str, int]] = []
    for i in range(n):
        if i < 50 or rnd.random() < 0.4:
            h = rnd.getrandbits(64)
        else:  # a variant of a recent page, within the distance or just past it
            h = _variant(rnd, rnd.choice(pages[-200:])[1], rnd.randint(0, 5))
        pages.append((f"http://127.0.2.{i % 30}/p{i}", h))
    return pages


@pytest.mark.parametrize("budget", [0, 300])
def test_a_batch_answers_as_one_redis_would(cluster: RedisCluster, budget: int) -> None:
    client = connect(cluster.url)
    nd = NearDuplicates(client)
    job = f"nd-same-{budget}"
    pages = _pages(budget + 1, 1500)
    got: list[str | None] = []
    for k in range(0, len(pages), 50):
        got += nd.find_or_add(job, pages[k:k + 50], 3, budget=budget)
    want = unbounded_reference(pages, 3) if budget == 0 else bounded_reference(pages, 3, budget)
    assert got == want
    assert 200 < sum(g is not None for g in got) < 1200
    if budget:  # each band forgets on its own tag, and still holds at most the budget
        records, band_entries = _held(client, job)
        assert 0 < records <= budget and 0 < band_entries <= budget, (records, band_entries)
    # The bands and the records are under five tags, on more than one master.
    tags = {k.decode().split("}")[0] + "}" for k in client.scan_iter(keys.simhash_band_pattern(job), count=1000)}
    assert tags == {keys.neardup_prefix(job)[:-1], *(keys.neardup_band_prefix(job, b)[:-1] for b in range(4))}
    masters = {cluster.master_for_key(tag + ":x") for tag in tags}
    assert len(masters) >= 2, masters
    # All but the count of resets, kept to know an add held up past this one.
    assert nd.reset(job) > 0
    assert [k.decode() for k in client.scan_iter(keys.simhash_band_pattern(job), count=1000)] == \
        [keys.simhash_epoch(job)]


def test_the_index_spreads_its_commands_over_the_masters(cluster: RedisCluster) -> None:
    # Job ids whose five tags fall on all three masters (as most do); the test web's crawl
    # counts its commands the same way.
    client = connect(cluster.url)
    job = next(j for j in (f"nd-spread-{i}" for i in range(100))
               if len({cluster.master_for_key(p + "x") for p in
                       (keys.neardup_prefix(j), *(keys.neardup_band_prefix(j, b) for b in range(4)))}) == 3)
    nodes = cluster.node_clients()
    try:
        before = {p: sum(int(v["calls"]) for v in c.info("commandstats").values()) for p, c in nodes.items()}
        nd = NearDuplicates(client)
        pages = _pages(7, 1000)
        for k in range(0, len(pages), 20):
            nd.find_or_add(job, pages[k:k + 20], 3, budget=0)
        calls = {p: sum(int(v["calls"]) for v in c.info("commandstats").values()) - before[p]
                 for p, c in nodes.items()}
    finally:
        for c in nodes.values():
            c.close()
    total = sum(calls.values())
    assert all(0.1 < n / total < 0.6 for n in calls.values()), calls


def test_batches_stored_at_the_same_moment_never_drop_both_near_duplicates(cluster: RedisCluster) -> None:
    job = "nd-race"
    rnd = random.Random(12)
    originals = [rnd.getrandbits(64) for _ in range(40)]
    # Each thread's batches hold variants of the same originals: near-duplicates of each other
    # stored at the same moment, in every interleaving the threads fall into.
    batches = [[(f"http://127.0.2.{t}/o{i}", _variant(rnd, h, rnd.randint(0, 1))) for i, h in enumerate(originals)]
               for t in range(4)]
    answers: dict[str, str | None] = {}
    lock = threading.Lock()

    def run(pages: list[tuple[str, int]]) -> None:
        nd = NearDuplicates(connect(cluster.url))
        for k in range(0, len(pages), 5):
            got = nd.find_or_add(job, pages[k:k + 5], 3, budget=0)
            with lock:
                answers.update(zip((u for u, _ in pages[k:k + 5]), got, strict=True))

    threads = [threading.Thread(target=run, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 4 * len(originals)
    hashes = {u: h for b in batches for u, h in b}
    for url, of in answers.items():
        if of is not None:  # a duplicate only of a page kept, and near it
            assert answers[of] is None, (url, of)
            assert (hashes[url] ^ hashes[of]).bit_count() <= 3
    # Of each original's four variants, at least one is kept; the race keeps more than one at
    # times (how many depends on how the threads fell), and a page stored after it finds them.
    for i in range(len(originals)):
        assert any(answers[f"http://127.0.2.{t}/o{i}"] is None for t in range(4))
    later = NearDuplicates(connect(cluster.url)).find_or_add(
        job, [(f"http://127.0.2.9/o{i}", h) for i, h in enumerate(originals)], 3, budget=0)
    assert all(of is not None and answers[of] is None for of in later), later


def test_a_job_of_the_layout_before_keeps_its_bands_under_one_tag(cluster: RedisCluster) -> None:
    # Layout "2": the whole index under the job's near-duplicate tag, as the one script had it.
    client = connect(cluster.url)
    client.hset(keys.meta("nd-two"), mapping={"id": "nd-two", keys.LAYOUT_FIELD: "2"})
    nd = NearDuplicates(client)
    h = 0x0123456789ABCDEF
    assert nd.find_or_add("nd-two", [("http://a/1", h)], 3, budget=300) == [None]
    assert nd.find_or_add("nd-two", [("http://a/2", h ^ 1)], 3, budget=300) == ["http://a/1"]
    found = {k.decode() for k in client.scan_iter("c:{nd-two~*", count=1000)}
    old = "c:{nd-two~nd}:"
    assert found and all(k.startswith(old) for k in found), found
    assert {old + "shseq", old + "sh:f", old + "sh:d:0"} <= found
    assert any(k.startswith(old + "sh:g0:0:") for k in found)
    assert nd.reset("nd-two") == len(found)



@pytest.mark.parametrize("where", ["one redis", "cluster"])
def test_a_batch_of_more_originals_than_a_generation_answers_as_a_scan(
        cluster: RedisCluster, r: redis.Redis, where: str) -> None:
    # A batch's own earlier originals count only while in the window, as indexed pages do (the
    # rebuild of a job sends 2,000 pages a batch).
    client = connect(cluster.url) if where == "cluster" else r
    nd = NearDuplicates(client)
    rnd = random.Random(21)
    pages: list[tuple[str, int]] = []
    for i in range(400):
        h = rnd.getrandbits(64) if i < 20 or rnd.random() < 0.5 else _variant(rnd, rnd.choice(pages[-40:])[1], 1)
        pages.append((f"http://127.0.2.1/p{i}", h))
    got: list[str | None] = []
    for k in range(0, len(pages), 100):
        got += nd.find_or_add("nd-big-batch", pages[k:k + 100], 3, budget=30)
    assert got == bounded_reference(pages, 3, 30)


def _held_back(nd: NearDuplicates) -> list[tuple[Any, ...]]:
    """Keep ``nd``'s adds to the bands from running, as a caller held up between deciding and
    adding would; returns them, to be run later (``_add_to_bands``)."""
    held: list[tuple[Any, ...]] = []
    nd._add_to_bands = lambda *args: held.append(args)  # type: ignore[method-assign]
    return held


def test_an_add_held_up_past_its_generation_or_a_reset_neither_leaks_nor_misleads(cluster: RedisCluster) -> None:
    client = connect(cluster.url)
    rnd = random.Random(5)
    slow, fast = NearDuplicates(client), NearDuplicates(client)
    held = _held_back(slow)
    x = rnd.getrandbits(64)
    assert slow.find_or_add("nd-late", [("http://127.0.2.1/x", x)], 3, budget=30) == [None]
    for k in range(0, 60, 5):  # six generations of 10 numbers go by
        fast.find_or_add("nd-late", [(f"http://127.0.2.2/{i}", rnd.getrandbits(64)) for i in range(k, k + 5)], 3,
                         budget=30)
    for args in held:
        NearDuplicates(client)._add_to_bands(*args)
    for k in range(60, 300, 5):
        fast.find_or_add("nd-late", [(f"http://127.0.2.2/{i}", rnd.getrandbits(64)) for i in range(k, k + 5)], 3,
                         budget=30)
    records, band_entries = _held(client, "nd-late")
    assert records <= 30 and band_entries <= 30, (records, band_entries)
    assert not [k for k in client.scan_iter("c:{nd-late~nd*}:sh:g0:*", count=1000)]
    # Held up past a reset (a periodic job's new cycle): its entry names a number another page
    # has since, which a near copy of it must not be taken for.
    fast.reset("nd-late")
    held.clear()
    assert slow.find_or_add("nd-late", [("http://127.0.2.1/x", x)], 3, budget=30) == [None]
    fast.reset("nd-late")
    assert fast.find_or_add("nd-late", [("http://127.0.2.3/y", rnd.getrandbits(64))], 3, budget=30) == [None]
    for args in held:
        NearDuplicates(client)._add_to_bands(*args)
    assert fast.find_or_add("nd-late", [("http://127.0.2.1/z", x ^ 1)], 3, budget=30) == [None]


@pytest.mark.parametrize("late_by", [0, 1])
def test_an_add_held_up_past_a_reset_leaves_the_next_cycle_a_fresh_index(cluster: RedisCluster,
                                                                          late_by: int) -> None:
    # A periodic job's new cycle resets the index while a slow caller still holds its adds of
    # pages numbered high in the cycle before: run after the reset (and after ``late_by`` of the
    # new cycle's batches), they must not set their bands back to those numbers (each band would
    # then drop the new cycle's adds as late ones), nor add to the new cycle's bands.
    client = connect(cluster.url)
    job = f"nd-cycle-{late_by}"
    slow, fast = NearDuplicates(client), NearDuplicates(client)
    before = _pages(31, 900)
    for k in range(0, len(before), 50):
        fast.find_or_add(job, before[k:k + 50], 3, budget=300)
    held = _held_back(slow)
    rnd = random.Random(8)
    assert slow.find_or_add(job, [(f"http://127.0.2.9/late{i}", rnd.getrandbits(64)) for i in range(5)], 3,
                            budget=300) == [None] * 5
    assert held and min(number for args in held for number, _ in args[2]) > 400
    fast.reset(job)
    after = _pages(32, 900)
    got: list[str | None] = []
    for k in range(0, len(after), 50):
        if k == 50 * late_by:
            for args in held:
                NearDuplicates(client)._add_to_bands(*args)
        got += fast.find_or_add(job, after[k:k + 50], 3, budget=300)
    assert got == bounded_reference(after, 3, 300)
    records, band_entries = _held(client, job)
    assert records <= 300 and band_entries <= 300, (records, band_entries)


def test_a_url_indexed_again_and_again_does_not_hide_the_original(cluster: RedisCluster) -> None:
    # A page is not its own duplicate, so each time one URL is stored it is indexed again: its
    # copies are candidates of a later page of that URL that only the records can set aside.
    nd = NearDuplicates(connect(cluster.url))
    h = 0x0123456789ABCDEF
    for _ in range(40):
        assert nd.find_or_add("nd-again", [("http://127.0.2.1/u", h)], 3, budget=0) == [None]
    assert nd.find_or_add("nd-again", [("http://127.0.2.1/o", h ^ 0xF)], 3, budget=0) == [None]  # 4 bits off
    assert nd.find_or_add("nd-again", [("http://127.0.2.1/u", h ^ 0x3)], 3, budget=0) == ["http://127.0.2.1/o"]


def test_batches_from_many_callers_keep_the_index_within_its_budget(cluster: RedisCluster) -> None:
    # A band's adds come out of order, by as many numbers as callers hold at once: what they
    # skip past is forgotten all the same.
    rnd = random.Random(17)
    batches = [[(f"http://127.0.2.4/{k}-{i}", rnd.getrandbits(64)) for i in range(20)] for k in range(90)]
    errors: list[BaseException] = []

    def run(mine: list[list[tuple[str, int]]]) -> None:
        nd = NearDuplicates(connect(cluster.url))
        try:
            for batch in mine:
                nd.find_or_add("nd-many", batch, 3, budget=30)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(batches[t::6],)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    records, band_entries = _held(connect(cluster.url), "nd-many")
    assert records <= 30 and band_entries <= 30, (records, band_entries)


def test_a_master_that_lost_its_scripts_gets_them_again(cluster: RedisCluster) -> None:
    # A master restarted or newly promoted has none of them: the calls sent together that find
    # one missing are run again on their own, which loads it.
    nd = NearDuplicates(connect(cluster.url))
    h = 0x0123456789ABCDEF
    assert nd.find_or_add("nd-noscript", [("http://127.0.2.1/a", h)], 3, budget=300) == [None]
    nodes = cluster.node_clients()
    try:
        for c in nodes.values():
            c.script_flush()
    finally:
        for c in nodes.values():
            c.close()
    assert nd.find_or_add("nd-noscript", [("http://127.0.2.1/b", h ^ 1)], 3, budget=300) == ["http://127.0.2.1/a"]
    assert nd.find_or_add("nd-noscript", [("http://127.0.2.1/c", h ^ 3)], 3, budget=300) == ["http://127.0.2.1/a"]
