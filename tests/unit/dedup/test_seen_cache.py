import random

from crawler.dedup.cache import SeenCache


def test_only_ever_answers_seen_for_urls_it_was_told() -> None:
    cache = SeenCache(100, seed=1)
    told: set[str] = set()
    rng = random.Random(2)
    for _ in range(20_000):
        url = f"u{rng.randrange(1000)}"
        if cache.seen(url):
            assert url in told  # a hit is always a URL Redis already answered for
        else:
            cache.add(url)
            told.add(url)
    assert len(cache) <= 100


def test_repeated_urls_win_the_cache_list() -> None:
    cache = SeenCache(20, seed=3)
    nav = [f"nav{i}" for i in range(8)]
    for page in range(2_000):
        for url in [*nav, f"page{page}"]:  # navigation repeats on every page, content does not
            if not cache.seen(url):
                cache.add(url)
    assert all(cache.seen(u) for u in nav)
    assert cache.hits / cache.lookups > 0.85  # 8 of every 9 occurrences are navigation
