"""The bench-scale web: deterministic, pages and links in the stated ranges, every page reachable."""

from __future__ import annotations

import re

from bench.scale import intervals, tenth_rates
from bench.scaleweb import Pages, ScaleSpec, links, reachable

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
