"""The shared bounded cache, and the canonicalisation cache built on it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from crawler.lru import LRU, str_size


def test_count_bound_drops_least_recently_used() -> None:
    evicted: list[tuple[str, int]] = []
    c: LRU[str, int] = LRU(3, on_evict=lambda k, v: evicted.append((k, v)))
    for i, k in enumerate("abc"):
        c.put(k, i)
    assert c.get("a") == 0  # a is now the most recent
    c.put("d", 3)
    assert "b" not in c and len(c) == 3 and evicted == [("b", 1)]
    c.put("a", 10)  # a replaced value is handed over too
    assert evicted[-1] == ("a", 0) and c.get("a") == 10
    assert c.pop("c") == 2 and evicted[-1] == ("a", 0)  # pop hands the value back, no callback


def test_byte_bound_and_oversized_values() -> None:
    c: LRU[str, str] = LRU(1000, 5_000, sizeof=str_size)
    for i in range(100):
        c.put(f"k{i}", "v" * 500)
    assert c.nbytes <= 5_000 and len(c) == 5_000 // str_size("k10", "v" * 500)
    c.put("huge", "x" * 10_000)  # larger than the whole bound: not kept, nothing else lost
    assert "huge" not in c and c.nbytes <= 5_000 and len(c) > 0
    assert sorted(c.clear(), key=len) and c.nbytes == 0 and len(c) == 0
    with pytest.raises(ValueError):
        LRU(0)


def test_threads_keep_the_bounds() -> None:
    c: LRU[int, str] = LRU(50, 20_000, sizeof=lambda k, v: len(v) + 100)

    def churn(base: int) -> None:
        for i in range(5_000):
            c.put(base + i % 300, "x" * (i % 200))
            c.get(base + (i * 7) % 300)

    threads = [threading.Thread(target=churn, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(c) <= 50 and c.nbytes <= 20_000
    assert c.nbytes == sum(len(v) + 100 for v in c.values())


CANON_PROBE = """
import tracemalloc
tracemalloc.start()
from crawler import urls
for i in range(1_000):
    urls.canonicalize(f"http://a.test/short/{i}")
short = len(urls._canonical_cache)
base = tracemalloc.get_traced_memory()[0]
for i in range(1_000):
    urls.canonicalize(f"http://a.test/{i}/" + "x" * 1_900)
grown = tracemalloc.get_traced_memory()[0] - base
print(short, len(urls._canonical_cache), urls._canonical_cache.nbytes, grown)
"""


def test_canonical_cache_bounded_by_count_and_bytes() -> None:
    env = {"CRAWLER_CANONICAL_CACHE_SIZE": "200", "CRAWLER_CANONICAL_CACHE_BYTES": "300000", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", CANON_PROBE], env=env, capture_output=True, text=True, check=True)
    short, long_entries, nbytes, grown = map(int, out.stdout.split())
    assert short == 200  # fed 1,000
    assert nbytes <= 300_000 and long_entries <= 300_000 // 3_800  # ~1.9 KB key and value each
    # Real memory follows the estimate: unbounded, these 1,000 URLs held 4.8 MB (measured); bounded
    # 1.1 MB, of which ~0.8 MB is urllib's own urlsplit cache of 128 of them.
    assert grown < 2_000_000


def test_canonical_cache_respects_each_calls_length_limit() -> None:
    from crawler.errors import BadURL
    from crawler.urls import canonicalize

    url = "http://a.test/" + "y" * 100
    assert canonicalize(url, 2048) == url
    with pytest.raises(BadURL):
        canonicalize(url, 50)  # cached by the first call, still too long for this one
