"""Dedup benchmark: exact set vs Bloom filter, memory, false positives, local cache.

    python -m bench.dedup [--urls N] [--probes N] [--runs N]

A benchmark, not a test: it prints a table and writes JSON under bench/results/. Runs against a
private redis-server on a free loopback port. Throughput is the median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import redis

from crawler.dedup.bloom import BloomSeen
from crawler.dedup.cache import SeenCache
from crawler.local.redis_server import RedisServer
from crawler.state.conn import connect
from crawler.testweb import WebModel

BATCH = 1000

# The exact set's own check-and-add, as the frontier's admit script does it (HSETNX per URL).
EXACT = """
local out = {}
for i = 1, #ARGV do out[i] = redis.call('HSETNX', KEYS[1], ARGV[i], 0) end
return out
"""


def urls(prefix: str, n: int) -> list[str]:
    return [f"http://site{i % 997}.example{i % 13}.com/{prefix}/page/{i}?ref={i % 7}" for i in range(n)]


def rate(fn, items: list[str]) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for i in range(0, len(items), BATCH):
        fn(items[i : i + BATCH])
    return len(items) / (time.perf_counter() - start)


def bench_throughput(r: redis.Redis, n: int, runs: int) -> dict[str, float]:
    exact = r.register_script(EXACT)
    out: dict[str, list[float]] = {"exact_new": [], "exact_dup": [], "bloom_new": [], "bloom_dup": []}
    for run in range(runs):
        r.flushdb()
        data = urls(f"r{run}", n)
        out["exact_new"].append(rate(lambda b: exact(keys=["seen"], args=b), data))
        out["exact_dup"].append(rate(lambda b: exact(keys=["seen"], args=b), data))
        bloom = BloomSeen(r, f"bench{run}", capacity=1_000_000, p=1e-6)
        out["bloom_new"].append(rate(bloom.add_many, data))
        out["bloom_dup"].append(rate(bloom.add_many, data))
    return {k: statistics.median(v) for k, v in out.items()}


def bench_bitfield_ceiling(r: redis.Redis, k: int, rounds: int = 100) -> dict[str, float]:
    """What Redis alone spends per URL on the k bit ops of a check-and-add: pre-packed
    ``BITFIELD SET u1`` commands, no Lua, no client work timed. The ceiling for any client."""
    r.flushdb()
    bits = 8 * ((1 << 20) - 16)
    r.set("ceiling", b"\0" * (bits // 8))
    rng = random.Random(7)
    conn = r.connection_pool.get_connection()
    try:
        packed = [conn.pack_command("BITFIELD", "ceiling", *[a for _ in range(BATCH * k)
                                                               for a in ("SET", "u1", rng.randrange(bits), 1)])
                  for _ in range(rounds)]
        cpu = r.info("cpu")
        before = cpu["used_cpu_user"] + cpu["used_cpu_sys"]
        start = time.perf_counter()
        for command in packed:
            conn.send_packed_command(command)
            conn.read_response()
        wall = time.perf_counter() - start
        cpu = r.info("cpu")
        used = cpu["used_cpu_user"] + cpu["used_cpu_sys"] - before
    finally:
        r.connection_pool.release(conn)
    n = rounds * BATCH
    return {"k": k, "redis_cpu_us_per_url": used / n * 1e6, "urls_per_redis_cpu_s": n / used,
            "urls_per_s_wall": n / wall}


def bench_memory(r: redis.Redis, n: int) -> dict[str, float]:
    r.flushdb()
    before = r.info("memory")["used_memory"]
    data = urls("mem", n)
    pipe = r.pipeline(transaction=False)
    for u in data:
        pipe.hsetnx("c:{m}:seen", u, 0)
        if len(pipe) >= 5000:
            pipe.execute()
    pipe.execute()
    exact_bytes = (r.info("memory")["used_memory"] - before) / n
    r.flushdb()
    bloom = BloomSeen(r, "mem", capacity=n, p=1e-6)
    for i in range(0, n, BATCH):
        bloom.add_many(data[i : i + BATCH])
    layer = bloom.layers()[0]
    m_formula = -n * __import__("math").log(1e-6) / __import__("math").log(2) ** 2
    used = bloom.memory()
    return {"exact_bytes_per_url": exact_bytes, "bloom_bytes_per_url": used / n, "bloom_bytes": used,
            "bloom_m_over_8": m_formula / 8, "bloom_memory_ratio": used / (m_formula / 8), "bloom_k": layer.k}


def bench_false_positives(r: redis.Redis, n: int, probes: int, p: float) -> dict[str, float]:
    r.flushdb()
    bloom = BloomSeen(r, "fp", capacity=n, p=p)
    data = urls("in", n)
    for i in range(0, n, BATCH):
        bloom.add_many(data[i : i + BATCH])
    layer = bloom.layers(refresh=True)[0]
    false_pos = 0
    for i in range(0, probes, 10_000):
        false_pos += sum(bloom.contains_many(urls(f"out{i}", 10_000)))
    measured = false_pos / probes
    return {"n": n, "p": p, "probes": probes, "false_positives": false_pos, "measured": measured,
            "theoretical": layer.expected_fp, "ratio": measured / layer.expected_fp}


def bench_cache(sites: int = 20, pages: int = 500, size: int = 100_000) -> dict[str, float]:
    """Link occurrences of the synthetic web in crawl order through one process's cache."""
    model = WebModel(sites, pages, links_per_page=20)
    cache = SeenCache(size)
    batches = local_only = 0
    for page in model.pages.values():
        links = list(dict.fromkeys((lk.site, lk.path) for lk in page.links if not lk.nofollow))
        misses = 0
        for s, p in links:
            key = f"job {s} {p}"
            if not cache.seen(key):
                cache.add(key)
                misses += 1
        batches += 1
        local_only += misses == 0
    return {"link_occurrences": cache.lookups, "hits": cache.hits, "hit_rate": cache.hits / cache.lookups,
            "redis_lookups_saved": cache.hits, "batches": batches, "batches_answered_locally": local_only}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=200_000)
    ap.add_argument("--memory-urls", type=int, default=1_000_000)
    ap.add_argument("--probes", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with RedisServer() as server:
        r = connect(server.url)
        result = {
            "throughput_urls_per_s": bench_throughput(r, args.urls, args.runs),
            "bitfield_ceiling": bench_bitfield_ceiling(r, k=BloomSeen(r, "k").layers()[0].k),
            "memory": bench_memory(r, args.memory_urls),
            "false_positives": bench_false_positives(r, 1_000_000, args.probes, 1e-4),
            "cache": bench_cache(),
            "redis_cpu_s": r.info("cpu")["used_cpu_user"],
        }
    t = result["throughput_urls_per_s"]
    m, fp, c = result["memory"], result["false_positives"], result["cache"]
    print(f"check-and-add, batches of {BATCH}, URLs/s (median of {args.runs}):")
    print(f"  exact set  new {t['exact_new']:>10,.0f}   duplicate {t['exact_dup']:>10,.0f}")
    print(f"  bloom      new {t['bloom_new']:>10,.0f}   duplicate {t['bloom_dup']:>10,.0f}   (target 300,000)")
    ce = result["bitfield_ceiling"]
    print(f"  ceiling: Redis alone spends {ce['redis_cpu_us_per_url']:.1f} us CPU per URL on k = {ce['k']} "
          f"pre-packed BITFIELD ops = {ce['urls_per_redis_cpu_s']:,.0f} URLs per Redis CPU-second "
          f"({ce['urls_per_s_wall']:,.0f} URLs/s wall, no client work)")
    print(f"memory: exact {m['exact_bytes_per_url']:.1f} B/URL; bloom {m['bloom_bytes_per_url']:.2f} B/URL, "
          f"{m['bloom_memory_ratio']:.3f} x m/8 (target <= 1.05), k = {m['bloom_k']}")
    print(f"false positives: {fp['false_positives']} in {fp['probes']:,} probes = {fp['measured']:.2e} vs "
          f"theoretical {fp['theoretical']:.2e} (ratio {fp['ratio']:.2f}, must be <= 1.5)")
    print(f"local cache: {c['hit_rate']:.1%} of {c['link_occurrences']:,} link occurrences (target >= 80%); "
          f"{c['batches_answered_locally']} of {c['batches']} pages needed no Redis lookup")
    out = Path(__file__).parent / "results" / f"dedup-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
