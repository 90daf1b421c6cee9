"""The bench-scale web: deterministic, pages and links in the stated ranges, every page reachable."""

from __future__ import annotations

import re

from bench.scale import accounted, intervals, key_family, tenth_rates
from bench.scaleweb import Pages, ScaleSpec, links, reachable
from crawler.dedup.simhash import simhash
from crawler.state import keys

SPEC = ScaleSpec(hosts=12, big_hosts=2, big_pages=400, pages=1_200, port=8080)


def test_hosts_share_the_pages_the_big_ones_first() -> None:
    assert SPEC.sizes[:2] == [400, 400] and sum(SPEC.sizes) == 1_200
    assert len(set(SPEC.sizes[2:])) <= 2
    assert ScaleSpec().total == 200_000 and sum(n >= 20_000 for n in ScaleSpec().sizes) == 6


def test_pages_are_deterministic_and_shaped_like_documentation() -> None:
    pages = Pages(SPEC)
    for host, page in [(0, 0), (0, 399), (5, 7), (11, 99)]:
        body = pages.body(host, page)
        assert body == Pages(SPEC).body(host, page)
        assert 30_000 <= len(body) <= 150_000
        hrefs = re.findall(rb'href="([^"]+)"', body)
        assert 100 <= len(hrefs) <= 300
        assert sum(h.startswith(b"#") for h in hrefs) > len(hrefs) / 2


def test_every_page_is_reachable_by_following_links() -> None:
    got = reachable(SPEC)
    assert got == {(h, p) for h, n in enumerate(SPEC.sizes) for p in range(n)}
    own, fragments = links(SPEC, 0, 0)
    assert f"http://{SPEC.ips[1]}:8080/p0" in own and fragments > 0


def test_rates_over_the_first_and_last_tenths() -> None:
    samples = [{"t": float(t), "fetched": 100 * t, "cpu_s": 0.5 * t} for t in range(11)]
    first, last = tenth_rates(samples)
    assert first == last == 100.0
    assert all(abs(i["cpu_ms_per_page"] - 5.0) < 1e-9 for i in intervals(samples))


def test_pages_differ_as_documentation_pages_do() -> None:
    # Near-duplicates only where slices overlap: the near-duplicate index sees real work.
    pages = Pages(SPEC)
    hashes = [simhash(pages.body(3, p).decode()) for p in range(40)]
    near = sum((a ^ b).bit_count() <= 3 for i, a in enumerate(hashes) for b in hashes[:i])
    assert near <= 2
    words = set(pages.body(3, 1).split())
    assert len(words) > 1000


def test_memory_account_by_key_family() -> None:
    j = "job1"
    assert key_family(keys.host_queue(j, "127.0.2.7:8080").encode()) == "job:q"
    assert key_family(keys.simhash_band(j, 2, 311).encode()) == "job:sh:#"
    assert key_family(keys.simhash_pages(j, 12).encode()) == "job:sh:d"
    assert key_family(keys.bloom_segment(j, 0, 3).encode()) == "job:bf:#"
    assert key_family(b"shard-0") == "shard-#"
    samples = [
        {"queued_redis": 1000, "seen": 5000, "stored": 100,
         "memory": {"job:q": {"bytes": 80_000, "keys": 3}, "job:bf:#": {"bytes": 10_000, "keys": 2}}},
        {"queued_redis": 10, "seen": 10_000, "stored": 4000, "memory": {
            "job:q": {"bytes": 900, "keys": 1}, "job:bf:#": {"bytes": 40_000, "keys": 2},
            "job:sh:#": {"bytes": 60_000, "keys": 40}, "job:sh:d": {"bytes": 300_000, "keys": 32},
            "job:shseq": {"bytes": 56, "keys": 1}}},
    ]
    acc = accounted(samples)
    assert acc["bytes_per_queued_url"] == 80.0
    assert acc["bytes_per_seen_url"] == 4.0
    assert acc["near_dup_bytes_per_page"] == (360_056) / 4000
    assert next(iter(acc["largest_at_end"])) == "job:sh:d"
